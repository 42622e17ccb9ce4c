"""Build results polled for all of a server's committers at once (`tables.server.build_results`),
on the suite's real Redis through Celery's own result backend."""

from __future__ import annotations

import threading
import uuid

import pytest
from celery import Celery, states
from celery.result import AsyncResult

from console.celery import app
from tables.server.build_results import (
    PolledRedisBackend,
    PolledResult,
    ResultPoll,
    configure_for_polling,
    poll_for,
)
from tests.poll import wait_until

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


def test_a_ready_result_is_answered_from_the_poll_without_asking_the_backend_again():
    tasks = _ids(3)
    poll = ResultPoll(app.backend, interval_s=0.0)
    ok, failed, revoked = (PolledResult(AsyncResult(t, app=app), poll) for t in tasks)
    try:
        app.backend.store_result(tasks[0], {"rows": 7}, states.SUCCESS)
        app.backend.store_result(tasks[1], ValueError("bad row"), states.FAILURE)
        app.backend.mark_as_revoked(tasks[2], "stopped")
        assert ok.ready() and failed.ready() and revoked.ready()
        for task in tasks:  # from here on, only what the poll read can answer
            app.backend.forget(task)
        assert ok.successful() and ok.get() == {"rows": 7}
        assert not failed.successful()
        error = failed.get(propagate=False)
        assert isinstance(error, ValueError) and str(error) == "bad row"
        with pytest.raises(ValueError, match="bad row"):
            failed.get()
        assert not revoked.successful()
        with pytest.raises(Exception, match="stopped"):
            revoked.get()
    finally:
        for task in tasks:
            app.backend.forget(task)


def test_a_polling_app_shares_one_backend_and_publishes_without_subscribing(settings):
    polling = Celery("polling-test", broker=settings.CELERY_BROKER_URL)
    polling.conf.result_backend = settings.CELERY_RESULT_BACKEND
    assert configure_for_polling(polling)
    queue = f"test-nobody-{uuid.uuid4().hex}"
    seen: list = []

    def publish() -> None:
        seen.append((polling.backend, polling.send_task("tables.nothing", queue=queue)))

    threads = [threading.Thread(target=publish) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    backends = {id(backend) for backend, _ in seen}
    try:
        assert len(backends) == 1 and isinstance(seen[0][0], PolledRedisBackend)
        assert seen[0][0].result_consumer.subscribed_to == set()  # nothing subscribed
        handle = poll_for(seen[0][1])
        polling.backend.store_result(handle.id, {"rows": 1}, states.SUCCESS)
        handle.poll.interval_s = 0.0
        assert handle.ready() and handle.get() == {"rows": 1}
        # Celery's own get() still works: it subscribes, then reads what is stored.
        waited = seen[1][1]
        key = polling.backend.get_key_for_task(waited.id)
        consumer = polling.backend.result_consumer

        def store_once_subscribed() -> None:
            wait_until(lambda: key in consumer.subscribed_to, timeout=10, what="subscribed")
            polling.backend.store_result(waited.id, {"rows": 2}, states.SUCCESS)

        storer = threading.Thread(target=store_once_subscribed)
        storer.start()
        assert waited.get(timeout=10) == {"rows": 2}
        storer.join()
    finally:
        polling.backend.client.delete(queue)
        for _, result in seen:
            polling.backend.forget(result.id)


def test_only_a_redis_result_backend_is_changed():
    other = Celery("other-test")
    other.conf.result_backend = "rpc://"
    assert not configure_for_polling(other)
    assert other.conf.result_backend == "rpc://"
