"""Whether submitted builds are done, for all the waiting committers of a server at once.

Every committer waits for its Spark build's Celery result, asking every `poll_s` (50 ms). Asked
one by one (`AsyncResult.ready()`: a GET and a decode each), a server's 20-odd committers in a
64-partition pause spent ~10 % of its CPU on it, while the builds they wait for run on the same
cores.

Contract:
- `ResultPoll.ready(task_id)` says whether the task's result is stored in a ready state (SUCCESS,
  FAILURE, REVOKED). One multi-key read (`MGET` of the result keys) per `interval_s` answers every
  caller: the caller that finds the last read older than that reads for every task asked about in
  the last `forget_after_s`; the others answer from it. A task is seen done at most one interval
  (20 ms, well under the committers' 50 ms poll: one read per interval costs next to nothing)
  later than when it was stored; the committer's own poll adds up to one of its polls.
- A failed read (Redis away) is logged once a minute and answers "not ready": the committer
  keeps waiting under its build lease, which the controller stops extending past its commit
  deadline (`AsyncResult.ready()` raised instead, and failed the commit at once).
- `PolledResult` is a `tables.server.committer.BuildHandle`: `ready()` from its poll, and once
  it is ready `successful` and `get` from the result the poll read (a failure's or a
  revocation's exception rebuilt by the backend, as Celery's `get` does), so no thread waits on
  Celery's result channel; `revoke` (and `get` before the poll saw the result) from the Celery
  result.
- A result backend that is not Redis-like (no `client`, `get_key_for_task`, `decode_result`) is
  asked directly, as before.
- `configure_for_polling(app)` (the server process, before it publishes anything): a Redis result
  backend becomes `PolledRedisBackend`, shared by the process's threads
  (`result_backend_thread_safe`). Celery otherwise makes a backend object per thread (its
  client, connection pool and result consumer: ~4 ms for every consumer thread's first build)
  and subscribes to each published task's result channel (`on_task_call`), a subscription
  nobody here reads: the committers poll. `AsyncResult.get()` still works, since it subscribes
  before it reads the stored result.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import Celery, states
from celery.backends.redis import RedisBackend
from celery.result import AsyncResult

from tables.domain.backoff import LogThrottle

__all__ = [
    "PolledRedisBackend",
    "PolledResult",
    "ResultPoll",
    "configure_for_polling",
    "poll_for",
]

log = logging.getLogger(__name__)

INTERVAL_S = 0.02
FORGET_AFTER_S = 2.0


class ResultPoll:
    def __init__(
        self,
        backend: Any,
        interval_s: float = INTERVAL_S,
        forget_after_s: float = FORGET_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.interval_s, self.forget_after_s, self.clock = interval_s, forget_after_s, clock
        self.reads = 0  # multi-key reads done (for tests and the curious)
        self._lock = threading.Lock()
        self._asked: dict[str, float] = {}  # task id -> when last asked about
        self._done: dict[str, dict[str, Any]] = {}  # task id -> its stored meta, once ready
        self._read_at = float("-inf")
        self._log = LogThrottle(every_s=60.0)

    def ready(self, task_id: str) -> bool:
        with self._lock:
            now = self.clock()
            self._asked[task_id] = now
            if task_id in self._done or now - self._read_at < self.interval_s:
                return task_id in self._done
            self._read_at = now
            for old in [t for t, at in self._asked.items() if now - at > self.forget_after_s]:
                del self._asked[old]
                self._done.pop(old, None)
            wanted = [t for t in self._asked if t not in self._done]
        done = self._read(wanted)
        with self._lock:
            self._done.update(done)
            return task_id in self._done

    def meta(self, task_id: str) -> dict[str, Any] | None:
        """The stored meta (`status`, `result`, ...) read for a task seen ready, else None."""
        with self._lock:
            return self._done.get(task_id)

    def _read(self, task_ids: list[str]) -> dict[str, dict[str, Any]]:
        backend = self.backend
        try:
            values = backend.client.mget([backend.get_key_for_task(t) for t in task_ids])
            self.reads += 1
            done = {}
            for task_id, value in zip(task_ids, values, strict=True):
                meta = None if value is None else backend.decode_result(value)
                if meta is not None and meta["status"] in states.READY_STATES:
                    done[task_id] = meta
            return done
        except Exception as exc:
            write, held = self._log.allow(type(exc).__name__, time.monotonic())
            if write:
                log.warning("build results not readable (%s; %d similar held back)", exc, held)
            return {}


class PolledResult:
    """A Celery result whose readiness comes from a `ResultPoll`."""

    def __init__(self, result: AsyncResult, poll: ResultPoll) -> None:
        self.result, self.poll = result, poll
        self.id = result.id

    def ready(self) -> bool:
        return self.poll.ready(self.result.id)

    def successful(self) -> bool:
        meta = self.poll.meta(self.id)
        return self.result.successful() if meta is None else meta["status"] == states.SUCCESS

    def get(self, timeout: float | None = None, propagate: bool = True) -> Any:
        meta = self.poll.meta(self.id)
        if meta is None:
            return self.result.get(timeout=timeout, propagate=propagate)
        if meta["status"] == states.SUCCESS:
            return meta["result"]
        error = self.poll.backend.exception_to_python(meta["result"])
        if propagate:
            raise error
        return error

    def revoke(self) -> None:
        self.result.revoke()


class PolledRedisBackend(RedisBackend):
    """Celery's Redis result backend, without subscribing to a task's result channel when the task
    is published: its results are polled (`ResultPoll`), and `AsyncResult.get()` subscribes
    itself."""

    def on_task_call(self, producer: Any, task_id: str) -> None:
        return None


def configure_for_polling(app: Celery) -> bool:
    """Make `app` (not yet publishing in this process) use one `PolledRedisBackend` for all its
    threads, when its result backend is Redis; True when it did."""
    url = str(app.conf.result_backend or "")
    if url.partition("://")[0] not in ("redis", "rediss"):
        return False
    app.conf.result_backend = f"{__name__}:PolledRedisBackend+{url}"
    app.conf.result_backend_thread_safe = True
    app.backend  # noqa: B018 - made now: threads racing to make it first would each make one
    return True


_polls: dict[tuple[int, type, str], ResultPoll] = {}
_polls_lock = threading.Lock()


def poll_for(result: AsyncResult) -> PolledResult | AsyncResult:
    """`result` polled with the process's one `ResultPoll` of its backend's kind and URL (Celery
    makes a backend object per thread; their Redis clients are alike and thread-safe, so the
    first one seen reads for all), or `result` itself when the backend cannot be read many keys
    at a time."""
    backend = result.backend
    if not all(hasattr(backend, name) for name in ("client", "get_key_for_task", "decode_result")):
        return result
    key = (os.getpid(), type(backend), str(getattr(backend, "url", "")))
    with _polls_lock:
        poll = _polls.get(key)
        if poll is None:
            poll = _polls[key] = ResultPoll(backend)
    return PolledResult(result, poll)
