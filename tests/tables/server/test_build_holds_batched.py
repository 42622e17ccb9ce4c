"""A server's committers asking about build back-offs at once share the database thread's queries
(`tables.server.build_holds`): the reads queued while it is busy are one query, the deletes one
statement, and each caller still gets its own segment's answer. The suite's real database; no
ZooKeeper: the held segment's fingerprint cannot be read (`_no_cluster`), so it is unknown and
its hold stands, as `tables.domain.build_backoff.hold` has it."""

from __future__ import annotations

import threading
import time

import pytest

from tables import build_backoffs
from tables.models import FailedBuild
from tables.server.build_holds import BuildHolds
from tests.poll import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

TABLE = "batchedHolds_REALTIME"
HELD = "batchedHolds__3__0__20210721T0600Z"


def _no_cluster():
    raise RuntimeError("no ZooKeeper in this test")


def _segments(n: int) -> list[str]:
    return [f"batchedHolds__{p}__0__20210721T0600Z" for p in range(n)]


def _busy(holds: BuildHolds) -> threading.Event:
    """Keep the database thread busy until the returned event is set."""
    release = threading.Event()
    started = threading.Event()

    def block() -> None:
        started.set()
        release.wait(30)

    holds._db.submit(block)
    assert started.wait(30)
    return release


def test_checks_queued_together_are_one_query_each_with_its_own_answer() -> None:
    build_backoffs.record_failure(
        TABLE,
        HELD,
        fingerprint="f1",
        error="BuildError: no",
        server="S",
        now_ms=int(time.time() * 1000),
    )
    holds = BuildHolds(_no_cluster, "Server_batched_1")
    release = _busy(holds)
    answers: dict[str, object] = {}

    def ask(segment: str) -> None:
        answers[segment] = holds.check(TABLE, segment)[0]

    threads = [threading.Thread(target=ask, args=(s,)) for s in _segments(8)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(holds._reads) == 8, timeout=30, what="8 reads queued")
    release.set()
    for thread in threads:
        thread.join(30)
    assert holds.queries == 1
    assert {s for s, hold in answers.items() if hold is not None} == {HELD}
    assert set(answers) == set(_segments(8))


def test_deletes_queued_together_are_one_statement() -> None:
    now = int(time.time() * 1000)
    for segment in _segments(5):
        build_backoffs.record_failure(
            TABLE, segment, fingerprint="f1", error="BuildError: no", server="S", now_ms=now
        )
    holds = BuildHolds(_no_cluster, "Server_batched_2")
    release = _busy(holds)
    for segment in _segments(4):
        holds.succeeded(TABLE, segment)
    release.set()
    wait_until(lambda: holds.queries == 1, timeout=30, what="the deletes ran")
    wait_until(
        lambda: (
            list(FailedBuild.objects.filter(table=TABLE).values_list("segment", flat=True))
            == [_segments(5)[4]]
        ),
        timeout=30,
        what="only the fifth record left",
    )
    holds.succeeded(TABLE, _segments(5)[4])  # the thread is idle: a statement of its own
    wait_until(
        lambda: not FailedBuild.objects.filter(table=TABLE).exists(), timeout=30, what="gone"
    )
    assert holds.queries == 2


def test_read_many_answers_only_the_keys_asked_for() -> None:
    now = int(time.time() * 1000)
    for table in (TABLE, "other_REALTIME"):
        build_backoffs.record_failure(
            table, HELD, fingerprint="f1", error="BuildError: no", server="S", now_ms=now
        )
    found = build_backoffs.read_many([(TABLE, HELD), (TABLE, _segments(1)[0])])
    assert list(found) == [(TABLE, HELD)] and found[(TABLE, HELD)].failures == 1
    assert build_backoffs.read_many([]) == {}
    build_backoffs.succeeded_many([(TABLE, HELD)])
    assert list(FailedBuild.objects.values_list("table", flat=True)) == ["other_REALTIME"]
