"""A server's side of the build back-off (issue 23): what its committer asks before a build and
tells after one, and what its consumers ask while they wait.

Contract:
- `check(table, segment)` -> (hold, fingerprint): the `Hold` the record (`tables.build_backoffs`)
  puts on the segment's build, or None, and the fingerprint of the table config and schema read
  from ZooKeeper now (`tables.domain.build_backoff.fingerprint`) when a record exists (None when
  there is none, or they cannot be read).
- `failed(table, segment, fingerprint, error)`: a build failed; the error is classified
  (`tables.domain.build_backoff.classify` on its type name and message) and a DETERMINISTIC one
  is recorded under `fingerprint` with this server's id (not when the fingerprint is unknown:
  the config could not be read); returns the kind.
- `succeeded(table, segment)`: a build worked; the segment's record (if any) goes.
- `hold_of(table, segment)`: the hold alone, for a consumer waiting after a refused commit;
  `hold_soon(table, segment)` sends its database read now and returns a callable that gives the
  hold later (`tables.server.hold_ahead`: a pauseless consumer near its end).
- Never raises: the back-off must not break a commit. A record that cannot be read or written
  (database or ZooKeeper trouble, or no answer from the database thread within `DB_WAIT_S`) is
  logged and read as "no hold", i.e. today's behaviour.
- Cost on the commit path: `check` is one indexed database read; the fingerprint (two ZooKeeper
  reads) is only read when a record exists, or after a deterministic failure (`failed` with
  `fingerprint` None reads it then: a config changed during that very build is recorded as the
  one it failed on, which costs one back-off until the next change or "Retry now").
  `succeeded` deletes in the background. Every database call runs on one thread of the server
  (one connection, checked with `close_old_connections` before each use), not on the consumer
  threads, which would otherwise each open one.
- Reads and deletes asked for while that thread is busy are done together: every read queued
  when the thread gets to them is one query (`build_backoffs.read_many`), every delete one
  statement (`build_backoffs.succeeded_many`); each is still made after it was asked for. In a
  64-partition pause a server's ~20 committers ask at once (a read and a delete each, ~2 ms of
  Django apiece: ~10 % of the servers' CPU in the pause).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from django.db import close_old_connections

from tables import build_backoffs
from tables.cluster.context import ClusterContext
from tables.cluster.reads import ClusterReader
from tables.domain.build_backoff import FailureKind, FailureRecord, Hold, classify, fingerprint
from tables.domain.build_backoff import hold as hold_of

__all__ = ["BuildHolds"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long a commit waits for the database thread's answer: a stalled database must not stall
#: the commit path (past it, the back-off is read as "no hold", as for any database trouble).
DB_WAIT_S = 5.0


def _fresh(call: Callable[[], T]) -> T:
    close_old_connections()  # a connection the database dropped, or past CONN_MAX_AGE, is renewed
    return call()


class BuildHolds:
    def __init__(
        self,
        ctx: Callable[[], ClusterContext],
        instance_id: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ctx = ctx
        self.instance_id = instance_id
        self.clock = clock
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="build-holds")
        self._lock = threading.Lock()
        self._reads: list[tuple[tuple[str, str], Future[FailureRecord | None]]] = []
        self._clears: set[tuple[str, str]] = set()
        self.queries = 0  # reads and deletes sent to the database (for tests and the curious)

    def _on_db(self, call: Callable[[], T]) -> T:
        """`call` on the database thread; TimeoutError past `DB_WAIT_S` (read as "no hold")."""
        return self._db.submit(_fresh, call).result(timeout=DB_WAIT_S)

    def _read_soon(self, table: str, segment: str) -> Future[FailureRecord | None]:
        """The record of `segment`, read on the database thread with the other reads queued by
        then (module contract)."""
        future: Future[FailureRecord | None] = Future()
        with self._lock:
            self._reads.append(((table, segment), future))
            first = len(self._reads) == 1
        if first:
            try:
                self._db.submit(self._read_queued)
            except RuntimeError as exc:  # shut down: nobody will read the queued ones
                with self._lock:
                    reads, self._reads = self._reads, []
                for _, queued in reads:
                    queued.set_exception(exc)
        return future

    def _read_queued(self) -> None:
        with self._lock:
            reads, self._reads = self._reads, []
        if not reads:
            return
        try:
            self.queries += 1
            found = _fresh(lambda: build_backoffs.read_many(key for key, _ in reads))
        except BaseException as exc:
            for _, future in reads:
                future.set_exception(exc)
            return
        for key, future in reads:
            future.set_result(found.get(key))

    def fingerprint(self, table: str) -> str | None:
        try:
            reader = ClusterReader(self.ctx())
            config = reader.get_table_config(table)
            return fingerprint(config.rest, reader.get_schema(config.schema_name).raw)
        except Exception as exc:
            log.warning("%s: cannot read the table config and schema: %s", table, exc)
            return None

    def check(self, table: str, segment: str) -> tuple[Hold | None, str | None]:
        try:
            record = self._read_soon(table, segment).result(timeout=DB_WAIT_S)
        except Exception:
            log.exception("%s: cannot read the build back-off record", segment)
            return None, None
        return self._hold(table, record)

    def _hold(self, table: str, record: object) -> tuple[Hold | None, str | None]:
        if record is None:
            return None, None
        current = self.fingerprint(table)
        return hold_of(record, now_ms=int(self.clock() * 1000), fingerprint=current), current

    def hold_of(self, table: str, segment: str) -> Hold | None:
        return self.check(table, segment)[0]

    def hold_soon(self, table: str, segment: str) -> Callable[[], Hold | None]:
        """`hold_of`, its database read sent now: the returned callable waits for that answer
        (at most `DB_WAIT_S`) and gives the hold. Never raises."""
        pending = self._read_soon(table, segment)

        def answer() -> Hold | None:
            try:
                record = pending.result(timeout=DB_WAIT_S)
            except Exception:
                log.exception("%s: cannot read the build back-off record", segment)
                return None
            return self._hold(table, record)[0]

        return answer

    def failed(
        self, table: str, segment: str, current: str | None, error: BaseException | object
    ) -> FailureKind:
        name, text = type(error).__name__, str(error)
        kind = classify(name, text)
        if kind is not FailureKind.DETERMINISTIC:
            return kind
        current = current or self.fingerprint(table)
        if current is None:
            return kind
        try:
            record = self._on_db(
                lambda: build_backoffs.record_failure(
                    table,
                    segment,
                    fingerprint=current,
                    error=text if text.startswith(f"{name}: ") else f"{name}: {text}",
                    server=self.instance_id,
                    now_ms=int(self.clock() * 1000),
                )
            )
            log.warning(
                "%s: the build failed deterministically (%d in a row); next try in %.0f s "
                "unless the table config or schema changes or an operator retries it",
                segment,
                record.failures,
                (record.next_retry_ms - record.last_failure_ms) / 1000,
            )
        except Exception:
            log.exception("%s: cannot record the failed build", segment)
        return kind

    def succeeded(self, table: str, segment: str) -> None:
        """The segment's record (if any) goes, in the background (with the others queued)."""
        with self._lock:
            first = not self._clears
            self._clears.add((table, segment))
        if first:
            try:
                self._db.submit(self._clear_queued)
            except RuntimeError:  # shut down: the records stay (one more build attempt at worst)
                with self._lock:
                    self._clears = set()

    def _clear_queued(self) -> None:
        with self._lock:
            clears, self._clears = self._clears, set()
        if not clears:
            return
        try:
            self.queries += 1
            _fresh(lambda: build_backoffs.succeeded_many(clears))
        except Exception:
            log.exception("cannot clear the build back-off records of %s", sorted(clears))
