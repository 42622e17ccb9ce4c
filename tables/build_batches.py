"""Pending segment builds in Redis: who may build which request, so that builds are batched.

Every `tables.spark_build_segment` task is registered when it is published (`register`, from a
Celery `before_task_publish` handler in `tables.tasks`): its arguments under its task id. The
spark worker that runs a task first claims that request, then claims every other pending one
(`claim_pending`) and builds them all together; the tasks of requests built that way find their
outcome recorded (`tables.builds`) and return it.

Keys, under `pinot:builds:<cluster>:` in the Redis of REDIS_URL:
- `pending` (sorted set): task ids by registration time (ms);
- `request:<task id>` (string, JSON arguments, expires after `REQUEST_TTL_S`);
- `claim:<task id>` (string: the task id of the claimant, which builds it; expires after
  `CLAIM_TTL_S` unless the claimant's `Heartbeat` renews it);
- `expect:<raw table>` (sorted set: segment names by when their announcement lapses,
  `EXPECT_TTL_S` after it was made): builds announced before their requests exist (`expect`: the
  controller's force commit, and so a pause, names the segments it forces). A batch of that table
  waits until each announced segment's request is registered, so that the first committer of a
  pause does not build alone while the others are still on their way, for as long as they keep
  coming (at most `BatchLimits.announced_stall_s` without a new registration) and at most
  `BatchLimits.announced_wait_max_s`; registering a request withdraws its announcement. Once
  the last announced request came, the batch starts (no settling: the burst is known complete).
A claim is taken with SET NX, so one request is built by one claimant at a time; a claim whose
claimant died expires, and a claim held under one's own id (a task redelivered after its worker
died) is taken over at once.
`wait_for_claim` (a task claiming its own request, waiting while another batch builds it),
`gather` and `claim_others` (a batch's other requests, within `BatchLimits`, after a burst of
registrations settled) are the steps `tables.builds` takes; `finish` removes the requests that
were built (or failed) and their claims. Nothing here is needed for correctness: a request nobody
registered, or whose registration expired, is built by its own task.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import redis

from tables.domain.names import LLCSegmentName

__all__ = [
    "CLAIM_TTL_S",
    "CLAIM_WAIT_MAX_S",
    "EXPECT_TTL_S",
    "REQUEST_TTL_S",
    "BatchLimits",
    "BuildQueue",
    "Heartbeat",
    "PendingBuild",
]

T = TypeVar("T")
REQUEST_TTL_S = 6 * 3600
EXPECT_TTL_S = 10  # an announced build not registered by then is not waited for
CLAIM_TTL_S = 30
CLAIM_WAIT_MAX_S = 900  # the longest a task waits for another batch to build its request
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


@dataclass(frozen=True)
class BatchLimits:
    max_builds: int  # requests in one batch
    max_rows: int  # offsets in one batch (its first request is always taken)
    settle_s: float  # a burst of registrations has settled when none came for this long
    wait_max_s: float  # the longest a batch waits for a burst to settle
    # Announced builds (`expect`) on their way: the longest a batch waits for them, and how long
    # without any new registration means the rest is not coming soon.
    announced_wait_max_s: float
    announced_stall_s: float


@dataclass(frozen=True)
class PendingBuild:
    """The arguments of one `tables.spark_build_segment` task, and its task id."""

    task_id: str
    table: str
    segment: str
    staging_key: str
    start_offset: int
    end_offset: int
    output_key: str | None = None
    registered_ms: int = 0  # when it was registered (epoch ms; 0: not registered)

    @property
    def rows(self) -> int:
        return max(0, self.end_offset - self.start_offset)

    @classmethod
    def from_task(cls, task_id: str, args: Sequence[Any], kwargs: dict[str, Any]) -> PendingBuild:
        names = ("table", "segment", "staging_key", "start_offset", "end_offset", "output_key")
        values = dict(zip(names, args, strict=False))
        values.update({k: v for k, v in kwargs.items() if k in names})
        return cls(
            task_id=task_id,
            table=str(values["table"]),
            segment=str(values["segment"]),
            staging_key=str(values["staging_key"]),
            start_offset=int(values["start_offset"]),
            end_offset=int(values["end_offset"]),
            output_key=values.get("output_key"),
        )


class BuildQueue:
    def __init__(self, client: redis.Redis, cluster: str) -> None:
        self.client = client
        self.prefix = f"pinot:builds:{cluster}:"
        self._renew = client.register_script(_RENEW)

    def _request_key(self, task_id: str) -> str:
        return f"{self.prefix}request:{task_id}"

    def _claim_key(self, task_id: str) -> str:
        return f"{self.prefix}claim:{task_id}"

    def register(self, build: PendingBuild, now_ms: int | None = None) -> None:
        """Record a published build request."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        record = {**asdict(build), "registered_ms": now_ms}
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self._request_key(build.task_id), json.dumps(record), ex=REQUEST_TTL_S)
        pipe.zadd(f"{self.prefix}pending", {build.task_id: now_ms})
        expect_key = self._expect_key_of(build.segment)
        if expect_key is not None:
            pipe.zrem(expect_key, build.segment)  # announced (`expect`): it has come
        pipe.execute()

    def pending(
        self, limit: int = 1000, known: dict[str, PendingBuild] | None = None
    ) -> list[tuple[PendingBuild, int]]:
        """Registered requests, oldest first, with their registration time (ms); registrations
        whose request expired are dropped. `known` (task id -> request, filled in here): requests
        read by an earlier call, not read again (a batch polling while a burst comes in)."""
        key = f"{self.prefix}pending"
        members = self.client.zrange(key, 0, limit - 1, withscores=True)
        if not members:
            return []
        known = {} if known is None else known
        ids = [m.decode() if isinstance(m, bytes) else str(m) for m, _ in members]
        unread = [i for i in ids if i not in known]
        values = self.client.mget([self._request_key(i) for i in unread]) if unread else []
        expired = []
        for task_id, value in zip(unread, values, strict=True):
            if value is None:
                expired.append(task_id)
            else:
                known[task_id] = PendingBuild(**json.loads(value))
        if expired:
            self.client.zrem(key, *expired)
        return [
            (known[i], int(score)) for i, (_, score) in zip(ids, members, strict=True) if i in known
        ]

    def claim(self, task_id: str, owner: str) -> bool:
        """Claim `task_id`'s request for `owner`; a claim `owner` already holds is renewed."""
        key = self._claim_key(task_id)
        if self.client.set(key, owner, nx=True, ex=CLAIM_TTL_S):
            return True
        held = self.client.get(key)
        if held is not None and held.decode() == owner:
            self.client.set(key, owner, ex=CLAIM_TTL_S)  # ours, from a run that died
            return True
        return False

    def claimant(self, task_id: str) -> str | None:
        held = self.client.get(self._claim_key(task_id))
        return held.decode() if held is not None else None

    def claim_pending(
        self, owner: str, exclude: Iterable[str], max_builds: int, max_rows: int
    ) -> list[PendingBuild]:
        """Claim pending requests for `owner`, oldest first, while the batch stays within
        `max_builds` requests and `max_rows` offsets (the first one is always taken)."""
        skip = set(exclude)
        taken: list[PendingBuild] = []
        rows = 0
        for build, _ in self.pending():
            if len(taken) >= max_builds:
                break
            if build.task_id in skip or (taken and rows + build.rows > max_rows):
                continue
            if self.claim(build.task_id, owner):
                taken.append(build)
                rows += build.rows
        return taken

    def release(self, task_ids: Iterable[str], owner: str) -> None:
        """Give claims up (without finishing the requests): their own tasks will build them."""
        for task_id in task_ids:
            key = self._claim_key(task_id)
            held = self.client.get(key)
            if held is not None and held.decode() == owner:
                self.client.delete(key)

    def forget(self, task_ids: Iterable[str]) -> None:
        """Drop registrations (not claims)."""
        ids = list(task_ids)
        if ids:
            pipe = self.client.pipeline(transaction=False)
            pipe.zrem(f"{self.prefix}pending", *ids)
            pipe.delete(*[self._request_key(i) for i in ids])
            pipe.execute()

    def finish(self, task_ids: Iterable[str]) -> None:
        """The requests are built (or failed) and recorded: drop them and their claims."""
        ids = list(task_ids)
        if ids:
            self.forget(ids)
            self.client.delete(*[self._claim_key(i) for i in ids])

    def wait_for_claim(
        self,
        mine: PendingBuild,
        recorded: Callable[[str], T | None],
        poll_s: float,
        timeout_s: float = CLAIM_WAIT_MAX_S,
    ) -> T | None:
        """Claim `mine` for its own task; while another batch holds it, wait (its claim expires
        if that batch's process dies) until `recorded(task id)` gives its outcome. None: claimed,
        and not built yet. TimeoutError when another batch still holds it after `timeout_s` (a
        batch that hangs keeps renewing its claim)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.claim(mine.task_id, mine.task_id):
                outcome = recorded(mine.task_id)
                if outcome is not None:
                    self.finish([mine.task_id])
                return outcome
            outcome = recorded(mine.task_id)
            if outcome is not None:
                return outcome
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{mine.segment}: another batch ({self.claimant(mine.task_id)}) still builds "
                    f"it after {timeout_s:.0f} s"
                )
            time.sleep(poll_s)

    def gather(
        self,
        mine: PendingBuild,
        limits: BatchLimits,
        recorded: Callable[[list[str]], set[str]],
        staged: Callable[[str], bool],
    ) -> list[PendingBuild]:
        """A batch: `mine` (claimed) first, then the other pending requests it takes. When others
        were registered moments ago (a pause, a force commit, many partitions committing), it
        first lets the burst settle (`settle`)."""
        mine = self.settle(limits, mine) or mine
        return [mine, *self.claim_others(mine.task_id, [mine], limits, recorded, staged)]

    def settle(self, limits: BatchLimits, mine: PendingBuild | None = None) -> PendingBuild | None:
        """Wait until a burst of registrations is complete: while builds announced for the
        tables of `mine` and of the pending requests are still on their way (within the
        announced limits), else until none came for `limits.settle_s` (at most `wait_max_s`).
        Returns `mine` with its registration time; without `mine` (a task helping to build what
        is pending, `tables.builds`), None at once when nothing is pending."""
        started = time.monotonic()
        awaiting = False
        known: dict[str, PendingBuild] = {}
        while True:
            now_ms = int(time.time() * 1000)
            pending = self.pending(known=known)
            if mine is not None:
                own = [ms for b, ms in pending if b.task_id == mine.task_id]
                if own:
                    mine = dataclasses.replace(mine, registered_ms=own[0])
            others = [(b, ms) for b, ms in pending if mine is None or b.task_id != mine.task_id]
            if mine is None and not others:
                return None
            times = [ms for _, ms in others]
            waited = time.monotonic() - started
            builds = [b for b, _ in others] + ([mine] if mine is not None else [])
            if self._awaited(builds):  # a pause's builds still coming: wait while they come
                awaiting = True
                latest = max(times + ([mine.registered_ms] if mine is not None else []))
                stalled = now_ms - latest >= limits.announced_stall_s * 1000
                if stalled or waited >= limits.announced_wait_max_s:
                    return mine
                time.sleep(0.02)
                continue
            if awaiting:
                return mine  # the last announced build came: nothing else to settle
            if not times or now_ms - max(times) >= limits.settle_s * 1000:
                return mine  # the burst settled
            if waited >= limits.wait_max_s:
                return mine
            time.sleep(0.05)

    def expect(self, segments: Iterable[str], now_ms: int | None = None) -> None:
        """Announce the builds of `segments` (LLC names) before their requests exist (see the
        module docstring); each announcement lapses after `EXPECT_TTL_S`. Best effort: the
        caller ignores a Redis error."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        lapses = now_ms + EXPECT_TTL_S * 1000
        by_table: dict[str, dict[str, int]] = {}
        for segment in segments:
            key = self._expect_key_of(segment)
            if key is not None:
                by_table.setdefault(key, {})[segment] = lapses
        if not by_table:
            return
        pipe = self.client.pipeline(transaction=False)
        for key, members in by_table.items():
            pipe.zadd(key, members)
            pipe.expire(key, EXPECT_TTL_S)
        pipe.execute()

    def _expect_key_of(self, segment: str) -> str | None:
        name = LLCSegmentName.parse(segment)
        return None if name is None else f"{self.prefix}expect:{name.table_name}"

    def _awaited(self, builds: Sequence[PendingBuild]) -> set[str]:
        """The announced segments of the tables of `builds` whose requests are not registered
        yet (a registration withdraws its announcement; a lapsed one is dropped)."""
        keys = sorted({k for b in builds if (k := self._expect_key_of(b.segment)) is not None})
        if not keys:
            return set()
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.zremrangebyscore(key, "-inf", int(time.time() * 1000))
            pipe.zrange(key, 0, -1)
        replies = pipe.execute()
        announced = {
            m.decode() if isinstance(m, bytes) else m for members in replies[1::2] for m in members
        }
        return announced - {b.segment for b in builds}

    def claim_others(
        self,
        owner: str,
        taken: list[PendingBuild],
        limits: BatchLimits,
        recorded: Callable[[list[str]], set[str]],
        staged: Callable[[str], bool],
    ) -> list[PendingBuild]:
        """Claim pending requests for `owner`'s batch (which holds `taken`): those still to
        build. One already built (`recorded(task ids)`: those of them whose outcome is recorded,
        asked once for all) is finished; one whose staged rows are gone
        (`staged(key)` False: its committer gave up, or never sent it) is left to its own task."""
        exclude = {owner, *(b.task_id for b in taken)}
        rows = limits.max_rows - sum(b.rows for b in taken)
        claimed = self.claim_pending(owner, exclude, limits.max_builds - len(taken), rows)
        built = recorded([b.task_id for b in claimed]) if claimed else set()
        found = []
        for build in claimed:
            if build.task_id in built:
                self.finish([build.task_id])
            elif not staged(build.staging_key):
                self.release([build.task_id], owner)
                self.forget([build.task_id])
            else:
                found.append(build)
        return found

    def renew(self, task_ids: Iterable[str], owner: str) -> None:
        for task_id in task_ids:
            self._renew(keys=[self._claim_key(task_id)], args=[owner, CLAIM_TTL_S * 1000])


class Heartbeat:
    """Renews `owner`'s claims every third of their lifetime while the batch runs."""

    def __init__(self, queue: BuildQueue, task_ids: Sequence[str], owner: str) -> None:
        self.queue = queue
        self.task_ids = list(task_ids)
        self.owner = owner
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="build-claims", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(CLAIM_TTL_S / 3):
            # A failed renewal: the next beat tries again (a lost claim: a duplicate build).
            with contextlib.suppress(redis.RedisError):
                self.queue.renew(self.task_ids, self.owner)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
