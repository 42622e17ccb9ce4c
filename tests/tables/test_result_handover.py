"""Build outcomes stored as their Celery tasks' results together (`tables.result_handover`), on
the real Redis result backend: what a committer polls and what `AsyncResult` reads."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from celery import states
from celery.result import AsyncResult

from console.celery import app
from tables.result_handover import store_outcomes

pytestmark = pytest.mark.redis


@dataclass(frozen=True)
class Outcome:
    segment: str
    rows: int

    def as_dict(self) -> dict[str, object]:
        return {"segment": self.segment, "rows": self.rows}


def test_a_group_is_stored_in_one_round_trip_as_mark_as_done_would_store_it():
    backend = app.backend
    ids = [f"handover-{uuid.uuid4().hex}" for _ in range(3)]
    reference = f"handover-{uuid.uuid4().hex}"
    backend.mark_as_done(reference, {"segment": "s", "rows": 1})
    executed = []
    pipeline = backend.client.pipeline

    def counted(*args, **kwargs):
        pipe = pipeline(*args, **kwargs)
        execute = pipe.execute
        pipe.execute = lambda *a, **k: executed.append(len(pipe.command_stack)) or execute(*a, **k)
        return pipe

    backend.client.pipeline = counted
    try:
        store_outcomes(backend, [(t, Outcome(f"seg{i}", i)) for i, t in enumerate(ids)])
    finally:
        del backend.client.pipeline
    assert executed == [6]  # a SET and a PUBLISH per task, one execute
    for i, task_id in enumerate(ids):
        result = AsyncResult(task_id, app=app)
        assert (result.state, result.get(timeout=5)) == (
            states.SUCCESS,
            {"segment": f"seg{i}", "rows": i},
        )
    stored = backend.client.get(backend.get_key_for_task(ids[0]))
    same = backend.client.get(backend.get_key_for_task(reference))
    assert set(backend.decode(stored)) == set(backend.decode(same))  # the same fields
    assert 0 < backend.client.ttl(backend.get_key_for_task(ids[0])) <= backend.expires
    for key in [*ids, reference]:
        backend.client.delete(backend.get_key_for_task(key))


def test_failures_are_stored_one_by_one_and_nothing_is_sent_for_nothing():
    backend = app.backend
    failed = f"handover-{uuid.uuid4().hex}"
    store_outcomes(backend, [(failed, RuntimeError("no rows"))])
    result = AsyncResult(failed, app=app)
    assert result.state == states.FAILURE and "no rows" in str(result.result)
    store_outcomes(backend, [])  # nothing
    backend.client.delete(backend.get_key_for_task(failed))
