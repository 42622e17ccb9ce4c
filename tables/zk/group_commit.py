"""Group commit of concurrent updates of one ZNRecord inside one process (Pinot's
IdealStateGroupCommit): what the controller uses for every IdealState write.

Contract:
- `update_idealstate(client, path, mutate)` takes what `tables.zk.records.update_record` takes and
  returns what it returns; `mutate` gets a copy of the current record and returns the new one (or
  None for "no change"); it may run several times, so it must not have side effects beyond noting
  what it decided (each run overwrites the last note).
- Calls for the same znode through the same ZooKeeper client (one session: one process, as far as
  ZooKeeper knows) that overlap in time queue. One caller, the leader, takes every queued call,
  reads the record once, runs each `mutate` in queue order, each on a copy of what the previous
  one produced, and writes the result once, compare-and-set on the version it read.
- Exactly once, in order: in the record written, each call's mutation was applied once, after
  those of every call queued before it, to the latest record. A `mutate` that returns None leaves
  the record as the previous call left it; one that raises changes nothing, and only its own
  caller gets the exception (as from `update_record`: it is not run again); the others' updates
  still land.
- A version conflict (the znode changed since the read: another process, or a write that does not
  go through this queue) re-reads the record and re-applies the whole batch, with the calls that
  queued meanwhile appended, after a full-jitter back-off (`tables.zk.store.backoff_delay`);
  after `max_attempts` conflicts every caller of the batch gets `ConflictLimitExceeded`. Any other
  failure of the read or the write (`NoNode`, connection loss) goes to every caller of the batch:
  none of their updates was written. A batch whose record is over the write limit
  (`codec.RecordTooLarge`) is applied again one call at a time, so only a call that is too large
  on its own fails.
- Each caller gets back the record as it was right after its own mutation (what it would have
  read back had it written alone; a record of its own, never shared with another caller) with the
  version and mtime of the write that carried it. That version may also hold later calls of the
  same batch: never write the returned record back with that version.
- The leader runs one batch, then hands the queue to the oldest waiting call, whose own thread
  runs the next batch: no caller serves the others for long, and none waits without a leader.
- What a batch wrote (its bytes and the version they got) is kept for the next batch of that
  queue, which applies its calls to those bytes and writes compare-and-set on that version
  without reading the znode first: under load a read was a round trip of 20-100 ms on every
  batch, and this process is the usual writer of its IdealStates. That try counts only if it
  holds: when the version moved (someone else wrote) it is a version conflict as above; when every
  call left the record as it was, or any call raised, its outcome is dropped and the batch runs
  at once from a fresh read (so a "no change" or an error always answers the znode as it is,
  never what this process last wrote; such a call may thus run twice). Any failure drops what
  was kept, and so does `KNOWN_FOR_S` passing (a write is a base for the batches of the same
  burst only); it is kept per kazoo client object, so a new client starts with nothing.
- A mutation that itself updates the same znode through the same client is not queued behind
  its own batch (that would wait forever): it writes on its own, and the batch then meets a
  version conflict and is applied again, as nested `update_record` calls behave.
- A forked child starts with empty queues.
"""

from __future__ import annotations

import copy
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import BadVersionError

from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.interface import ZkStore
from tables.zk.records import VersionedRecord
from tables.zk.store import ConflictLimitExceeded, backoff_delay
from tables.zk.zookeeper import raw

__all__ = ["GroupCommit", "update_idealstate", "waiting"]

Mutate = Callable[[ZNRecord], ZNRecord | None]
DEFAULT_MAX_ATTEMPTS = 200
#: How long the last write of a znode is trusted as the base of the next batch. A burst of
#: commits writes within it; past it a batch reads, so that a znode deleted and made again (its
#: version starting over) cannot pass a compare-and-set meant for the old one by the chance of
#: an equal version, later than a burst.
KNOWN_FOR_S = 2.0


@dataclass(eq=False)
class _Call:
    """One caller's update: its mutation, then its outcome (a result or an error)."""

    mutate: Mutate
    wake: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    record: ZNRecord | None = None  # the state right after this mutation, in the current attempt
    result: VersionedRecord | None = None
    error: BaseException | None = None

    @property
    def settled(self) -> bool:
        return self.result is not None or self.error is not None

    def outcome(self) -> VersionedRecord:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@dataclass(eq=False)
class _Queue:
    pending: deque[_Call] = field(default_factory=deque)
    running: bool = False


class GroupCommit:
    """The queues of one process, one per (client, znode) with calls in flight."""

    def __init__(
        self,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_attempts = max_attempts
        self.sleep = sleep
        self.clock = clock
        self._lock = threading.Lock()
        self._queues: dict[tuple[int, str], _Queue] = {}
        self._local = threading.local()
        # per kazoo client (weakly: a new client never inherits a dead one's), per path: the
        # last write's bytes, the version they got and when
        self._written: weakref.WeakKeyDictionary[Any, dict[str, tuple[bytes, int, float]]] = (
            weakref.WeakKeyDictionary()
        )

    def reset(self) -> None:
        """Forget every queue (a forked child: the threads that held them are not there)."""
        self._lock = threading.Lock()
        self._queues = {}
        self._written = weakref.WeakKeyDictionary()

    def _last_written(self, client: ZkStore, path: str) -> tuple[bytes, int] | None:
        """The last write of `path` through `client`, if made within `KNOWN_FOR_S`; forgotten
        once asked (the caller writes again, or reads)."""
        with self._lock:
            known = self._written.get(raw(client), {}).pop(path, None)
        if known is None or self.clock() - known[2] > KNOWN_FOR_S:
            return None
        return known[0], known[1]

    def _wrote(self, client: ZkStore, path: str, data: bytes, version: int) -> None:
        with self._lock:
            self._written.setdefault(raw(client), {})[path] = (data, version, self.clock())

    def waiting(self, client: ZkStore, path: str) -> int:
        """How many calls for `path` wait for a leader to take them (for tests)."""
        with self._lock:
            queue = self._queues.get(self._key(client, path))
            return 0 if queue is None else len(queue.pending)

    def update(self, client: ZkStore, path: str, mutate: Mutate) -> VersionedRecord:
        """Queue `mutate` for `path`; returns once the batch that carried it is written."""
        call = _Call(mutate)
        key = self._key(client, path)
        if key in self._leading():  # from a mutation of this queue's batch: a write of its own
            _Batch(client, path, self, list).run([call])
            return call.outcome()
        with self._lock:
            queue = self._queues.setdefault(key, _Queue())
            queue.pending.append(call)
            lead = not queue.running
            queue.running = True
        if not lead:
            call.wake.wait()
        if not call.done:  # leading: this call is in the queue, so in the batch taken
            self._lead(client, path, key, queue)
        return call.outcome()

    def _leading(self) -> set[tuple[int, str]]:
        """The queues whose batch this thread is running."""
        if not hasattr(self._local, "keys"):
            self._local.keys = set()
        return self._local.keys

    @staticmethod
    def _key(client: ZkStore, path: str) -> tuple[int, str]:
        return id(raw(client)), path

    def _take(self, queue: _Queue) -> list[_Call]:
        with self._lock:
            taken = list(queue.pending)
            queue.pending.clear()
        return taken

    def _lead(self, client: ZkStore, path: str, key: tuple[int, str], queue: _Queue) -> None:
        batch = self._take(queue)
        self._leading().add(key)
        try:
            _Batch(client, path, self, lambda: self._take(queue)).run(batch)
        except BaseException as exc:  # the leader's thread is interrupted: nobody waits forever
            for call in batch:
                if not call.settled:
                    call.error = exc
            raise
        finally:
            self._leading().discard(key)
            for call in batch:
                call.done = True
                call.wake.set()
            self._hand_over(key, queue)

    def _hand_over(self, key: tuple[int, str], queue: _Queue) -> None:
        with self._lock:
            if queue.pending:
                queue.pending[0].wake.set()  # its thread leads the next batch
                return
            queue.running = False
            if self._queues.get(key) is queue:
                del self._queues[key]


class _Batch:
    """The calls of one batch, applied and written together (retried as a group)."""

    def __init__(
        self, client: ZkStore, path: str, owner: GroupCommit, more: Callable[[], list[_Call]]
    ) -> None:
        self.client = client
        self.path = path
        self.owner = owner
        self.more = more

    def run(self, batch: list[_Call]) -> None:
        """Settle every call of `batch`; calls queued during conflicts are appended to it."""
        for attempt in range(1, self.owner.max_attempts + 1):
            if attempt > 1:
                batch.extend(self.more())
            live = [call for call in batch if not call.settled]
            try:
                if not live or self._attempt(live):
                    return
            except codec.RecordTooLarge as exc:
                self._one_by_one(live, exc)
                return
            except Exception as exc:  # the read or the write failed: nothing was written
                _fail_all(live, exc)
                return
            self.owner.sleep(backoff_delay(attempt))
        _fail_all(
            [call for call in batch if not call.settled],
            ConflictLimitExceeded(
                f"{self.path}: version conflict on each of {self.owner.max_attempts} attempts"
            ),
        )

    def _attempt(self, live: list[_Call]) -> bool:
        """Read, apply every live call, write; False on a version conflict. First, when the last
        write of this queue is known, the same on its bytes without the read (module contract)."""
        known = self.owner._last_written(self.client, self.path)
        if known is not None:
            tried = self._try_known(live, *known)
            if tried is not None:  # written, or a conflict: retried as any conflict is
                return tried
        data, stat = self.client.get(self.path)
        state = self._apply(live, data)
        if state is None:  # nothing changed
            self._settle(live, stat.version, stat.mtime)
            return True
        encoded = codec.encode(state)
        try:
            written = self.client.set(self.path, encoded, version=stat.version)
        except BadVersionError:
            return False
        self.owner._wrote(self.client, self.path, encoded, written.version)
        self._settle(live, written.version, written.mtime)
        return True

    def _try_known(self, live: list[_Call], data: bytes, version: int) -> bool | None:
        """The batch applied to the last write's bytes and written on its version: True when that
        held; False on a version conflict (someone else wrote); None when it does not count (no
        change, or a call raised). Unless True, every call is as it was before."""
        outcome: bool | None = None
        try:
            state = self._apply(live, data)
            if state is not None and all(call.error is None for call in live):
                encoded = codec.encode(state)
                written = self.client.set(self.path, encoded, version=version)
                self.owner._wrote(self.client, self.path, encoded, written.version)
                self._settle(live, written.version, written.mtime)
                return True
        except BadVersionError:
            outcome = False
        except BaseException:
            self._forget(live)
            raise
        self._forget(live)
        return outcome

    @staticmethod
    def _forget(live: list[_Call]) -> None:
        for call in live:
            call.record = call.error = None

    @staticmethod
    def _apply(live: list[_Call], data: bytes) -> ZNRecord | None:
        """Every live call on the record of `data`, in order (each call's outcome noted); the
        record after the last change, or None when none changed it."""
        state = codec.decode(data)
        changed = False
        for call in live:
            try:
                new = call.mutate(state.copy())
            except Exception as exc:
                call.error = exc
                continue
            if new is None:
                call.record = state.copy()
            else:
                call.record, state, changed = new, new, True
        return state if changed else None

    @staticmethod
    def _settle(live: list[_Call], version: int, mtime_ms: int) -> None:
        for call in live:
            if call.error is None and call.record is not None:
                call.result = VersionedRecord(call.record, version, mtime_ms)

    def _one_by_one(self, live: list[_Call], exc: codec.RecordTooLarge) -> None:
        """Too large together: each call alone, so only one too large by itself fails."""
        if len(live) == 1:
            live[0].error = exc
            return
        for call in live:
            call.record = None
            if call.error is None:
                _Batch(self.client, self.path, self.owner, list).run([call])


def _fail_all(calls: list[_Call], exc: BaseException) -> None:
    for call in calls:
        if call.error is None:
            call.error = _own_copy(exc)


def _own_copy(exc: BaseException) -> BaseException:
    """A copy of `exc` for one caller (several threads raising one instance share a traceback)."""
    try:
        duplicate = copy.copy(exc)
    except Exception:
        return exc
    duplicate.__cause__, duplicate.__context__ = exc.__cause__, exc.__context__
    return duplicate.with_traceback(exc.__traceback__)


_default = GroupCommit()
os.register_at_fork(after_in_child=_default.reset)


def update_idealstate(client: ZkStore, path: str, mutate: Mutate) -> VersionedRecord:
    """`update_record` through the process's group commit (see the module's contract)."""
    return _default.update(client, path, mutate)


def waiting(client: ZkStore, path: str) -> int:
    """How many calls for `path` wait in the process's group commit (for tests)."""
    return _default.waiting(client, path)
