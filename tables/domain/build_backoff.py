"""When a failed segment build may run again (issue 23): pure policy, no I/O; takes `now`.

Contract:
- `classify(type_name, message)` sorts a failed build into DETERMINISTIC (the build itself
  refused: the builder's own `BuildError` about the rows or the config, or a Spark job that failed
  with an error about the data or the query: `AnalysisException`, `PythonException`,
  `ParseException`, Spark's illegal-argument, upgrade, arithmetic, number-format and date-time
  errors; the same rows with the same config fail again) and TRANSIENT (everything else, the
  default: a lost worker, a task time limit or revocation, the deep store, Redis or ZooKeeper
  unreachable, Spark or its gateway gone, the staged rows missing, the one-shot fault point
  `spark.<segment>.build_fails`). It reads a type name and a message only, so it gives the same
  answer in the Spark worker (`tables.builds`, the raised exception) and in the committer (the
  exception the Celery result carries back, or `BuildError("<Type>: <message>")` as a Job row
  recorded it: a leading "<Type>: " is read as the type).
- `fingerprint(table_config, schema)`: a short hash of the table config's and schema's documents
  (canonical JSON): a config fix changes it, a write of the same documents does not.
- `BackoffPolicy(first_s, cap_s).delay_s(n)`: the wait after the n-th deterministic failure in a
  row under one fingerprint: `first_s * 2**(n-1)`, at most `cap_s`.
- `after_failure(record, ...)`: the segment's record after one more deterministic failure: the
  count goes on under the same fingerprint, starts again at 1 under a new one; `next_retry_ms` is
  the failure time plus the policy's delay; the error is kept trimmed to `ERROR_CHARS`; the
  servers that tried are kept in the order they first failed.
- `hold(record, now_ms, fingerprint)`: the `Hold` a segment's next build waits for, or None when
  it may build now: no record, the back-off over, or the fingerprint changed (None: unknown, e.g.
  ZooKeeper unreadable: the record holds). Clearing the record (an operator's "Retry now", a
  successful build) is the store's job: no record, no hold.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DETERMINISTIC_FAULT",
    "ERROR_CHARS",
    "BackoffPolicy",
    "FailureKind",
    "FailureRecord",
    "Hold",
    "after_failure",
    "classify",
    "fingerprint",
    "hold",
]

ERROR_CHARS = 2000
DETERMINISTIC_FAULT = "fault injection (deterministic)"  # tables.builds' build_rejects point

# Spark's (and the JVM's) errors about the query or the data: rerunning the same job fails again.
_DETERMINISTIC_CAUSES = frozenset(
    {
        "AnalysisException",
        "PythonException",
        "ParseException",
        "IllegalArgumentException",
        "SparkIllegalArgumentException",
        "SparkUpgradeException",
        "ArithmeticException",
        "SparkArithmeticException",
        "NumberFormatException",
        "SparkNumberFormatException",
        "DateTimeException",
        "SparkDateTimeException",
        "SchemaError",
        "TableConfigError",
    }
)
_BUILD_ERRORS = frozenset({"BuildError", "DataLoss"})
_SPARK_JOB = re.compile(r"^the Spark job failed: (?P<cause>[A-Za-z_][\w.]*):")
_TYPE_PREFIX = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exceeded|Lost)): ")
_TRANSIENT_BUILD_ERRORS = (
    "fault injection: ",  # the one-shot spark.<segment>.build_fails points
    "the staged rows ",  # the committer's staging vanished: a new attempt stages again
    "not built",
)


class FailureKind(StrEnum):
    DETERMINISTIC = "deterministic"
    TRANSIENT = "transient"


def classify(type_name: str, message: str) -> FailureKind:
    """DETERMINISTIC or TRANSIENT (module contract)."""
    name = type_name.rsplit(".", 1)[-1]
    text = message.strip()
    if name in _BUILD_ERRORS:
        found = _TYPE_PREFIX.match(text)
        if found is not None:  # a Job row's "<Type>: <message>" given back as a BuildError
            return classify(found["type"], text[found.end() :])
        if text.startswith(DETERMINISTIC_FAULT):
            return FailureKind.DETERMINISTIC
        job = _SPARK_JOB.match(text)
        if job is not None:
            cause = job["cause"].rsplit(".", 1)[-1]
            return (
                FailureKind.DETERMINISTIC
                if cause in _DETERMINISTIC_CAUSES
                else FailureKind.TRANSIENT
            )
        if text.startswith(_TRANSIENT_BUILD_ERRORS):
            return FailureKind.TRANSIENT
        return FailureKind.DETERMINISTIC  # the builder's own refusal of the rows or the config
    if name in _DETERMINISTIC_CAUSES:
        return FailureKind.DETERMINISTIC
    return FailureKind.TRANSIENT


def fingerprint(table_config: Mapping[str, Any], schema: Mapping[str, Any]) -> str:
    """16 hex digits of SHA-256 over both documents as canonical JSON."""
    text = json.dumps(
        {"tableConfig": table_config, "schema": schema}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class BackoffPolicy:
    first_s: float = 60.0
    cap_s: float = 3600.0

    def delay_s(self, failures: int) -> float:
        """The wait after the `failures`-th deterministic failure in a row (>= 1)."""
        exponent = min(max(failures, 1) - 1, 62)
        return min(self.first_s * 2.0**exponent, max(self.cap_s, self.first_s))


@dataclass(frozen=True)
class FailureRecord:
    """A segment's deterministic build failures in a row under one fingerprint."""

    fingerprint: str
    failures: int
    first_failure_ms: int
    last_failure_ms: int
    next_retry_ms: int
    error: str
    servers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hold:
    """The segment's next build waits until `until_ms`; `reason` says why, for people."""

    until_ms: int
    reason: str


def after_failure(
    record: FailureRecord | None,
    *,
    now_ms: int,
    fingerprint: str,
    error: str,
    server: str,
    policy: BackoffPolicy,
) -> FailureRecord:
    """The record after one more deterministic failure (module contract)."""
    trimmed = error.strip()[:ERROR_CHARS]
    if record is None or record.fingerprint != fingerprint:
        failures, first, servers = 1, now_ms, ()
    else:
        failures, first, servers = record.failures + 1, record.first_failure_ms, record.servers
    if server and server not in servers:
        servers = (*servers, server)
    delay_ms = int(policy.delay_s(failures) * 1000)
    return FailureRecord(fingerprint, failures, first, now_ms, now_ms + delay_ms, trimmed, servers)


def _utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def hold(record: FailureRecord | None, *, now_ms: int, fingerprint: str | None) -> Hold | None:
    """The hold on the segment's next build, or None (module contract)."""
    if record is None or now_ms >= record.next_retry_ms:
        return None
    if fingerprint is not None and fingerprint != record.fingerprint:
        return None
    first_line = record.error.splitlines()[0] if record.error else "unknown error"
    reason = f"build failed: {first_line[:300]}; next try at {_utc(record.next_retry_ms)}"
    return Hold(record.next_retry_ms, reason)
