"""Build results polled for all of a server's committers at once (`tables.server.build_results`),
on the suite's real Redis through Celery's own result backend."""

from __future__ import annotations

import threading
import uuid

import pytest
from celery import states
from celery.result import AsyncResult

from console.celery import app
from tables.server.build_results import PolledResult, ResultPoll, poll_for

pytestmark = [pytest.mark.redis]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _ids(count: int) -> list[str]:
    return [f"test-{uuid.uuid4().hex}" for _ in range(count)]


def test_one_read_answers_every_committer_until_the_interval_passes():
    backend, clock = app.backend, Clock()
    poll = ResultPoll(backend, interval_s=0.05, clock=clock)
    tasks = _ids(20)
    try:
        assert [poll.ready(t) for t in tasks] == [False] * 20
        assert poll.reads == 1  # the first call read (for itself); the others answered from it
        for task in tasks[:5]:
            backend.store_result(task, {"segment": task}, states.SUCCESS)
        backend.store_result(tasks[5], None, states.STARTED)  # stored, but not done
        backend.store_result(tasks[6], ValueError("no"), states.FAILURE)
        assert not any(poll.ready(t) for t in tasks)  # still the same interval
        clock.now += 0.06
        answers = [poll.ready(t) for t in tasks]
        assert poll.reads == 2  # one read for all twenty
        assert answers == [True] * 5 + [False, True] + [False] * 13
        clock.now += 0.06
        assert poll.ready(tasks[0]) and poll.reads == 2  # a done task: answered without a read
    finally:
        for task in tasks:
            backend.forget(task)


def test_tasks_nobody_asks_about_are_forgotten():
    backend, clock = app.backend, Clock()
    poll = ResultPoll(backend, interval_s=0.05, forget_after_s=2.0, clock=clock)
    old, new = _ids(2)
    assert not poll.ready(old)
    clock.now += 3
    assert not poll.ready(new)
    assert set(poll._asked) == {new}  # the committer of `old` stopped asking: not read for


def test_an_unreachable_redis_is_not_ready_and_raises_nothing(caplog):
    class Away:
        client = type(
            "C", (), {"mget": staticmethod(lambda keys: (_ for _ in ()).throw(OSError("down")))}
        )()
        get_key_for_task = staticmethod(app.backend.get_key_for_task)
        decode_result = staticmethod(app.backend.decode_result)

    poll = ResultPoll(Away(), clock=Clock())
    assert poll.ready("t1") is False
    assert "build results not readable (down" in caplog.text


def test_the_committers_threads_share_one_poll_and_the_rest_comes_from_celery():
    tasks = _ids(2)
    handles: list = []

    def submit(task: str) -> None:  # Celery gives each thread a backend object of its own
        handles.append(poll_for(AsyncResult(task, app=app)))

    for task in tasks:
        thread = threading.Thread(target=submit, args=(task,))
        thread.start()
        thread.join()
    first, second = handles
    assert isinstance(first, PolledResult) and first.poll is second.poll
    try:
        app.backend.store_result(tasks[0], {"rows": 3}, states.SUCCESS)
        first.poll.interval_s = 0.0
        assert first.ready() and not second.ready()
        assert first.successful() and first.get(timeout=5) == {"rows": 3}
    finally:
        for task in tasks:
            app.backend.forget(task)
