"""Every wait of a consuming replica's protocol loop is bounded (tables.server.consumer).

A replica told to CATCH_UP to an offset its partition never reaches (a stale or forged winner)
stops following it after `catch_up_s` and asks the controller again from where it got, instead of
waiting forever; a CATCH_UP to an offset it already has is a HOLD. The stream is a real Redis
topic; the controller is a scripted client, so the answers are exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.conf import settings

from tables.domain.completion_response import Response, Status
from tables.redisconn import get_redis
from tables.server.consumer import (
    CATCH_UP_S,
    MAX_HOLD_S,
    ConsumingSegment,
    PartitionStats,
    Phase,
    SegmentConsumer,
)
from tables.streams.redis_streams import RedisTopicAdmin
from tests.poll import wait_until

pytestmark = [pytest.mark.redis]

TABLE = "githubEvents_REALTIME"
PARTITION = 2  # the `topic` fixture's partition 2 holds 3 rows, offsets 1..3


class ScriptedController:
    """Answers segmentConsumed from a script (the last answer repeats); records the questions."""

    def __init__(self, *answers: Response) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[int, str | None, int]] = []
        self._lock = threading.Lock()

    def segment_consumed(self, table, segment, offset, reason, row_count, start=False) -> Response:
        with self._lock:
            self.asked.append((offset, reason, row_count))
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def segment_stopped_consuming(self, *args: object) -> Response:
        raise AssertionError("the consumer must not fail")

    def questions(self) -> list[tuple[int, str | None, int]]:
        with self._lock:
            return list(self.asked)


def _consumer(
    topic: str,
    controller: ScriptedController,
    catch_up_s: float,
    hold_s: float = 0.05,
    committed_end: Callable[[], int | None] | None = None,
) -> SegmentConsumer:
    provider = RedisTopicAdmin(get_redis(settings.REDIS_URL)).provider(topic)
    spec = ConsumingSegment(
        TABLE,
        f"githubEvents__{PARTITION}__0__20240501T1030Z",
        topic,
        PARTITION,
        start_offset=1,
        threshold_rows=3,  # the partition's three rows end the segment (rowLimit)
        window_ms=3_600_000,
        creation_ms=int(time.time() * 1000),
    )
    consumer = SegmentConsumer(
        spec,
        provider,
        controller,  # type: ignore[arg-type]
        lambda consumer, response: False,
        PartitionStats(TABLE, topic, PARTITION),
        hold_s=hold_s,
        fetch_timeout_ms=50,
        committed_end=committed_end,
    )
    consumer.catch_up_s = catch_up_s
    return consumer


def _run_until(consumer: SegmentConsumer, phase: Phase, what: str) -> None:
    """Start the consumer, wait for `phase`, then stop it."""
    consumer.start()
    try:
        wait_until(lambda: consumer.phase is phase, timeout=30, what=what)
    finally:
        consumer.stop()
        consumer.join(10)


def test_the_default_catch_up_deadline_outlasts_the_fsms_commit_deadline():
    assert CATCH_UP_S == 126.6  # notify-winner 6.6 s + the 120 s commit timeout


def test_a_catch_up_the_stream_never_reaches_is_given_up_and_asked_again(topic):
    controller = ScriptedController(
        Response(Status.CATCH_UP, offset="1000000"),  # far beyond the partition's latest (4)
        Response(Status.DISCARD),
    )
    consumer = _consumer(topic, controller, catch_up_s=0.3)
    _run_until(consumer, Phase.DISCARDED, "asked again")
    # It asked, followed the CATCH_UP as far as the stream goes (offset 4), gave up at the
    # deadline and asked again from there.
    assert controller.questions() == [(4, "rowLimit", 3), (4, "rowLimit", 3)]
    assert consumer.finished


def test_a_catch_up_it_can_reach_is_followed_to_the_offset(topic):
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    controller = ScriptedController(
        Response(Status.CATCH_UP, offset="6"), Response(Status.HOLD, offset="6")
    )
    consumer = _consumer(topic, controller, catch_up_s=CATCH_UP_S)
    consumer.start()
    try:
        wait_until(lambda: consumer.phase is Phase.CATCHING_UP, timeout=30, what="catching up")
        admin.produce(topic, PARTITION, [b"{}"] * 5, now_ms=0)  # offsets 4..8
        wait_until(lambda: len(controller.questions()) >= 2, timeout=30, what="caught up")
    finally:
        consumer.stop()
        consumer.join(10)
    assert controller.questions()[:2] == [(4, "rowLimit", 3), (6, "rowLimit", 5)]
    assert consumer.rows == 0  # stopped: the rows are dropped


def test_a_catch_up_to_an_offset_it_already_has_is_a_hold(topic, caplog):
    controller = ScriptedController(
        Response(Status.CATCH_UP, offset="2"),  # behind the replica (at 4)
        Response(Status.KEEP, offset="4"),
    )
    consumer = _consumer(topic, controller, catch_up_s=CATCH_UP_S)
    with caplog.at_level("WARNING", logger="tables.server.consumer"):
        _run_until(consumer, Phase.KEPT, "kept")
    assert controller.questions() == [(4, "rowLimit", 3), (4, "rowLimit", 3)]
    assert not [r for r in caplog.records if "unexpected answer" in r.getMessage()]


class RecordedWaits(threading.Event):
    """A consumer's wake-up event that records how long each wait would be, and returns at once."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(0)


def test_holds_in_a_row_wait_longer_up_to_pinots_max_hold_time(topic):
    hold, not_sent = Response(Status.HOLD, offset="4"), Response(Status.NOT_SENT)
    controller = ScriptedController(
        *[hold] * 6, not_sent, hold, hold, Response(Status.KEEP, offset="4")
    )
    consumer = _consumer(topic, controller, catch_up_s=CATCH_UP_S, hold_s=0.5)
    waits = consumer._wakeup = RecordedWaits()
    _run_until(consumer, Phase.KEPT, "kept")
    assert len(controller.questions()) == 10
    # Doubling from hold_s while HOLD repeats, capped at 3 s (MAX_HOLD_S); any other answer
    # starts again from hold_s.
    assert waits.timeouts == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 0.5, 0.5, 1.0]


def test_a_hold_while_another_replica_commits_waits_pinots_max_hold_time(topic):
    """`committerChosen`: nothing to do until that commit ends (ONLINE ends the wait) or fails,
    so the first wait is already MAX_HOLD_S; plain HOLDs go on doubling from hold_s."""
    chosen = Response(Status.HOLD, offset="4", committer_chosen=True)
    plain = Response(Status.HOLD, offset="4")
    controller = ScriptedController(chosen, chosen, plain, Response(Status.KEEP, offset="4"))
    consumer = _consumer(topic, controller, catch_up_s=CATCH_UP_S, hold_s=0.5)
    waits = consumer._wakeup = RecordedWaits()
    _run_until(consumer, Phase.KEPT, "kept")
    assert len(controller.questions()) == 4
    assert waits.timeouts == [MAX_HOLD_S, MAX_HOLD_S, 2.0]


@pytest.mark.parametrize(
    ("committed_end", "phase", "asked_after_online"),
    [(4, Phase.KEPT, 0), (3, Phase.DISCARDED, 0), (None, Phase.KEPT, 1)],
)
def test_a_holding_replica_going_online_answers_itself_from_the_committed_end_offset(
    topic, committed_end, phase, asked_after_online
):
    """Pinot's goOnlineFromConsuming: KEEP when it ends where the committed segment ends, else
    DISCARD, without a call to the controller; only when the end offset is unknown (not DONE
    yet) does it ask once more."""
    controller = ScriptedController(Response(Status.HOLD))
    # Held 3 s after its first ask (finish() ends that wait): nobody asks in between.
    consumer = _consumer(topic, controller, 30, hold_s=3.0, committed_end=lambda: committed_end)
    consumer.start()
    try:
        wait_until(lambda: len(controller.questions()) == 1, timeout=30, what="holding")
        controller.answers = [Response(Status.KEEP)]  # the controller's answer, when asked
        asked = len(controller.questions())
        consumer.finish()  # the replica goes ONLINE: somebody committed
        wait_until(lambda: consumer.phase is phase, timeout=30, what=str(phase))
        assert consumer.join(10)
    finally:
        consumer.stop()
        consumer.join(10)
    assert len(controller.questions()) - asked == asked_after_online
