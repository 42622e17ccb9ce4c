"""The record of segment builds that failed for a reason waiting cannot cure (issue 23).

Contract:
- One `tables.models.FailedBuild` row per (table with type, segment) whose committed build failed
  DETERMINISTICALLY (`tables.domain.build_backoff.classify`): the fingerprint of the table config
  and schema it failed on, the failures in a row under that fingerprint, the first and last
  failure, when the next build may run (`tables.domain.build_backoff.after_failure` with
  `policy()`: BUILD_FAILURE_BACKOFF_SECONDS doubling up to BUILD_FAILURE_BACKOFF_MAX_SECONDS), the
  last error (trimmed) and the servers that tried. Transient failures are not recorded: they keep
  the consumer's short back-off.
- `hold(table, segment, fingerprint, now_ms)` is what a committer asks before it builds (and its
  consumer, while it waits): the `Hold` to wait for, or None. A changed fingerprint (a config fix)
  or a cleared row lets the build run at once.
- `read_many(keys)` / `succeeded_many(keys)`: `read` / `succeeded` of many (table, segment) keys
  in one query (a server's committers asking at once, `tables.server.build_holds`).
- `record_failure` adds one failure in one transaction (the row locked where the database can;
  two replicas failing at once both count); `succeeded` deletes the row (a later failure starts
  the back-off again); `clear` is the operator's "Retry now": deletes it, True when there was one.
- `forget_table(table)`: a deleted table's rows go with it (the table delete endpoint calls it).
- `rows(table_contains)`: the rows for the errors page and `/api/v1/failedBuilds`, newest failure
  first.
- `retry(table, segment)`: `clear` for an operator, checked first: a malformed table name, or a
  segment name that is not an LLC name of that table, is `BadRequest` (400); a segment without a
  record is `NotFound` (404); nothing is changed then. Returns `{"table", "segment", "failures"}`
  (the failures the cleared record counted).

Why the database and not ZooKeeper: the record must outlive a server's restart and be seen by
every replica (the controller may hand COMMIT to another one), and the console must show it. The
database the `Job` rows and durable counters live in does all three: every server is a Django
process with the same DATABASES (its re-ingestion already counts failures there), and pages and
/api/v1 read the database only (import contract "pages-read-the-mirror"); a ZooKeeper record
would need the mirror to copy it before any page could show it. Nothing here is cluster truth the
controller acts on: losing a row only means one more build attempt.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from tables.cluster.errors import BadRequest, NotFound
from tables.domain.build_backoff import BackoffPolicy, FailureRecord, Hold, after_failure
from tables.domain.build_backoff import hold as hold_of
from tables.domain.names import (
    InvalidName,
    LLCSegmentName,
    check_table_name,
    raw_table_name,
    table_name_with_type,
)
from tables.models import FailedBuild

__all__ = [
    "as_record",
    "clear",
    "forget_table",
    "hold",
    "policy",
    "read",
    "read_many",
    "record_failure",
    "retry",
    "rows",
    "succeeded",
    "succeeded_many",
]


def policy() -> BackoffPolicy:
    return BackoffPolicy(
        first_s=float(settings.BUILD_FAILURE_BACKOFF_SECONDS),
        cap_s=float(settings.BUILD_FAILURE_BACKOFF_MAX_SECONDS),
    )


def _moment(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def as_record(row: FailedBuild) -> FailureRecord:
    return FailureRecord(
        fingerprint=row.fingerprint,
        failures=row.failures,
        first_failure_ms=_ms(row.first_failure_at),
        last_failure_ms=_ms(row.last_failure_at),
        next_retry_ms=_ms(row.next_retry_at),
        error=row.error,
        servers=tuple(str(s) for s in (row.servers or [])),
    )


def read(table: str, segment: str) -> FailureRecord | None:
    row = FailedBuild.objects.filter(table=table, segment=segment).first()
    return None if row is None else as_record(row)


def _of(keys: Iterable[tuple[str, str]]) -> QuerySet[FailedBuild] | None:
    """The rows of `keys` (one condition per table); None for no keys."""
    by_table: dict[str, set[str]] = {}
    for table, segment in keys:
        by_table.setdefault(table, set()).add(segment)
    if not by_table:
        return None
    wanted = Q()
    for table, segments in by_table.items():
        wanted |= Q(table=table, segment__in=sorted(segments))
    return FailedBuild.objects.filter(wanted)


def read_many(keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], FailureRecord]:
    """`read` of every (table, segment) of `keys` in one query: the records found, by key."""
    found = _of(keys)
    return {} if found is None else {(r.table, r.segment): as_record(r) for r in found}


def hold(table: str, segment: str, fingerprint: str | None, now_ms: int) -> Hold | None:
    """The hold on `segment`'s next build (module contract)."""
    return hold_of(read(table, segment), now_ms=now_ms, fingerprint=fingerprint)


def record_failure(
    table: str, segment: str, *, fingerprint: str, error: str, server: str, now_ms: int
) -> FailureRecord:
    """One more deterministic failure of `segment`'s build; the record as written."""
    for attempt in range(2):  # a concurrent first insert of the same row: read it and go on
        try:
            with transaction.atomic():
                found = (
                    FailedBuild.objects.select_for_update()
                    .filter(table=table, segment=segment)
                    .first()
                )
                record = after_failure(
                    None if found is None else as_record(found),
                    now_ms=now_ms,
                    fingerprint=fingerprint,
                    error=error,
                    server=server,
                    policy=policy(),
                )
                values = {
                    "fingerprint": record.fingerprint,
                    "failures": record.failures,
                    "first_failure_at": _moment(record.first_failure_ms),
                    "last_failure_at": _moment(record.last_failure_ms),
                    "next_retry_at": _moment(record.next_retry_ms),
                    "error": record.error,
                    "servers": list(record.servers),
                }
                if found is None:
                    FailedBuild.objects.create(table=table, segment=segment, **values)
                else:
                    FailedBuild.objects.filter(pk=found.pk).update(**values)
                return record
        except IntegrityError:
            if attempt:
                raise
    raise AssertionError("unreachable")


def succeeded(table: str, segment: str) -> None:
    FailedBuild.objects.filter(table=table, segment=segment).delete()


def succeeded_many(keys: Iterable[tuple[str, str]]) -> None:
    """`succeeded` of every (table, segment) of `keys` in one statement."""
    found = _of(keys)
    if found is not None:
        found.delete()


def clear(table: str, segment: str) -> bool:
    """The operator's "Retry now": True when a row was deleted."""
    deleted, _ = FailedBuild.objects.filter(table=table, segment=segment).delete()
    return deleted > 0


def forget_table(table: str) -> int:
    """Delete the rows of `table` (with type); how many there were."""
    deleted, _ = FailedBuild.objects.filter(table=table).delete()
    return deleted


def rows(table_contains: str = "") -> QuerySet[FailedBuild]:
    found = FailedBuild.objects.all()
    if table_contains:
        found = found.filter(table__icontains=table_contains)
    return found.order_by("-last_failure_at", "table", "segment")


def retry(table: str, segment: str) -> dict[str, object]:
    """The operator's "Retry now", checked first (module contract)."""
    try:
        typed = table_name_with_type(raw_table_name(check_table_name(table)))
    except InvalidName as exc:
        raise BadRequest(str(exc)) from None
    name = LLCSegmentName.parse(segment)
    if name is None:
        raise BadRequest(f"Segment name is not in LLC format: {segment}")
    if name.table_name != raw_table_name(typed):
        raise BadRequest(f"segment {segment} is not a segment of table {raw_table_name(typed)}")
    with transaction.atomic():
        found = FailedBuild.objects.select_for_update().filter(table=typed, segment=segment).first()
        if found is None:
            raise NotFound(f"no failed build of segment {segment} of {typed} is backing off")
        found.delete()
    return {"table": typed, "segment": segment, "failures": found.failures}
