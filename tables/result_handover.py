"""Storing several build outcomes as their Celery tasks' results at once.

A batch hands its segments over a publish group at a time (`tables.builds`: up to 8). Celery's
`mark_as_done` costs two Redis round trips per task (a read of the stored state, then a
transaction that writes the result and publishes it), and with the result backend's
`appendfsync always` each write waits for the disk: in a 64-partition pause a group's hand-overs
took 5-250 ms, one after another, while the committers waited.

Contract:
- `store_outcomes(backend, pairs)` stores each (task id, outcome) as that task's result.
- Successes, with a Redis result backend (`client`, `get_key_for_task`, `encode` and Celery's
  `_get_result_meta`), go in one pipeline: per task the value `mark_as_done` would store (SET with
  the backend's expiry, `result_expires`) and its PUBLISH on the task's key, so a waiting
  `AsyncResult.get()` wakes as before. The stored state is not read first (`mark_as_done` reads
  it to never overwrite a SUCCESS): only a published segment's outcome is written here, the same
  outcome the task itself returns from its Job row.
- Failures (an `Exception`), and every outcome with another backend: `mark_as_failure` /
  `mark_as_done`, one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery import states

__all__ = ["store_outcomes"]


def store_outcomes(backend: Any, pairs: Sequence[tuple[str, Any]]) -> None:
    """`pairs`: (task id, an outcome with `as_dict()` or an Exception), see the module."""
    done = [(task_id, outcome.as_dict()) for task_id, outcome in pairs if not _failed(outcome)]
    for task_id, outcome in pairs:
        if _failed(outcome):
            backend.mark_as_failure(task_id, outcome)
    if not done:
        return
    if not all(hasattr(backend, a) for a in ("client", "get_key_for_task", "_get_result_meta")):
        for task_id, result in done:
            backend.mark_as_done(task_id, result)
        return
    pipe = backend.client.pipeline(transaction=False)
    for task_id, result in done:
        meta = backend._get_result_meta(
            result=result, state=states.SUCCESS, traceback=None, request=None
        )
        meta["task_id"] = task_id
        key, value = backend.get_key_for_task(task_id), backend.encode(meta)
        pipe.set(key, value, ex=backend.expires or None)  # Celery's SETEX, without its warning
        pipe.publish(key, value)
    pipe.execute()


def _failed(outcome: object) -> bool:
    return isinstance(outcome, Exception)
