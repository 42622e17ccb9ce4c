"""A consumer on a real Redis stream: fault injection ends it in ERROR and it says why
(segmentStoppedConsuming); offsets the stream trimmed before it read them are recorded as exact
ranges of its segment.

The stream is read through `GatedStream`, the real `RedisStreamProvider` that fetches only when
the test allows it (one permit per fetch), so the test can trim the stream between two fetches.
"""

from __future__ import annotations

import threading

import pytest
from django.conf import settings

from tables.domain.completion_response import Response, Status
from tables.domain.segment_states import FORCE_COMMIT
from tables.redisconn import get_redis
from tables.server import consumer as consumer_module
from tables.server.consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from tables.streams.base import MessageBatch
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tests.poll import wait_until

pytestmark = [pytest.mark.redis]
ME = "Server_127.0.0.1_7001"


class RecordingClient:
    """Answers HOLD to segmentConsumed; records segmentStoppedConsuming, answering `refusals`
    first (then PROCESSED)."""

    def __init__(self, *refusals: Status) -> None:
        self.stopped: list[tuple[str, int, str]] = []
        self.refusals = list(refusals)

    def segment_consumed(self, *args: object) -> Response:
        return Response(Status.HOLD)

    def segment_stopped_consuming(self, table, segment, offset, reason) -> Response:
        self.stopped.append((segment, offset, reason))
        return Response(self.refusals.pop(0) if self.refusals else Status.PROCESSED)


class GatedStream(RedisStreamProvider):
    """Fetches from Redis only with a permit; without one a fetch is an empty poll."""

    def __init__(self, topic: str) -> None:
        super().__init__(get_redis(settings.REDIS_URL), topic)
        self.permits = threading.Semaphore(0)

    def fetch(self, partition: int, start: int, most: int, timeout_ms: int) -> MessageBatch:
        if not self.permits.acquire(timeout=max(timeout_ms, 1) / 1000):
            return MessageBatch([], start, start, False)
        return super().fetch(partition, start, most, timeout_ms)


def _consumer(topic: str, client: RecordingClient, stream=None) -> SegmentConsumer:
    spec = ConsumingSegment(
        "t_REALTIME", "t__0__0__20240501T1030Z", topic, 0, 1, 1000, 3_600_000, 0
    )
    return SegmentConsumer(
        spec,
        stream or RedisStreamProvider(get_redis(settings.REDIS_URL), topic),
        client,  # type: ignore[arg-type]
        lambda consumer, response: False,
        PartitionStats("t_REALTIME", topic, 0),
        clock=lambda: 1.0,  # inside the one-hour window: only rows or faults end it
        fetch_timeout_ms=20,
        instance_id=ME,
    )


@pytest.mark.parametrize("point", [f"server.{ME}.consumer_fails", "server.any.consumer_fails"])
def test_an_injected_failure_ends_the_consumer_in_error_and_says_why(
    topic, settings, tmp_path, point
):
    settings.FAULT_INJECTION_DIR = str(tmp_path)
    (tmp_path / "server.Server_elsewhere_1.consumer_fails").write_text("")  # not this server
    client = RecordingClient()
    consumer = _consumer(topic, client)
    consumer.start()
    try:
        wait_until(lambda: consumer.next_offset == 2, what="the partition's row read")
        assert consumer.phase is Phase.CONSUMING
        (tmp_path / point).write_text("")
        wait_until(lambda: client.stopped, what="segmentStoppedConsuming")
    finally:
        consumer.stop()
        consumer.join(5)
    reason = f"consumerError: InjectedConsumerFailure: fault injection: {point}"
    assert client.stopped == [("t__0__0__20240501T1030Z", 2, reason)]
    assert consumer.phase is Phase.ERROR
    assert consumer.stopped_reason == reason
    assert not (tmp_path / point).exists()  # tripped once
    assert (tmp_path / "server.Server_elsewhere_1.consumer_fails").exists()


def test_segment_stopped_consuming_is_sent_again_until_the_controller_processed_it(
    topic, settings, tmp_path, monkeypatch
):
    """A controller restarting (NOT_SENT) or not leading yet (NOT_LEADER) does not get the last
    word: without PROCESSED, the replica would stay CONSUMING in the IdealState."""
    monkeypatch.setattr(consumer_module, "STOPPED_RETRY_FIRST_S", 0.01)
    settings.FAULT_INJECTION_DIR = str(tmp_path)
    client = RecordingClient(Status.NOT_SENT, Status.NOT_LEADER, Status.FAILED)
    consumer = _consumer(topic, client)
    (tmp_path / f"server.{ME}.consumer_fails").write_text("")
    consumer.start()
    try:
        consumer.join(10)
        assert consumer.finished
    finally:
        consumer.stop()
        consumer.join(5)
    reason = f"consumerError: InjectedConsumerFailure: fault injection: server.{ME}.consumer_fails"
    assert client.stopped == [("t__0__0__20240501T1030Z", 1, reason)] * 4
    assert consumer.phase is Phase.ERROR


def test_a_stopped_replica_ends_the_resending(topic, settings, tmp_path):
    settings.FAULT_INJECTION_DIR = str(tmp_path)
    client = RecordingClient(*[Status.NOT_LEADER] * 100)
    consumer = _consumer(topic, client)
    (tmp_path / f"server.{ME}.consumer_fails").write_text("")
    consumer.start()
    try:
        wait_until(lambda: client.stopped, what="segmentStoppedConsuming")
    finally:
        consumer.stop()  # the controller took the replica OFFLINE some other way
        consumer.join(5)
    assert consumer.finished  # stop() ended a back-off wait (0.5 s, 1 s, ... of 100 refusals)
    assert client.refusals


def _step(stream: GatedStream, consumer: SegmentConsumer, next_offset: int) -> None:
    stream.permits.release()
    wait_until(lambda: consumer.next_offset == next_offset, what=f"read up to {next_offset}")


def test_offsets_trimmed_before_they_were_read_are_recorded_as_exact_ranges(topic):
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    stream = GatedStream(topic)
    consumer = _consumer(topic, RecordingClient(), stream)
    # The `topic` fixture wrote offset 1 of partition 0.
    admin.produce(topic, 0, [b"{}"] * 10, now_ms=0)  # offsets 2..11
    consumer.start()
    try:
        _step(stream, consumer, 12)
        admin.produce(topic, 0, [b"{}"] * 10, now_ms=0)  # 12..21
        admin.trim_before(topic, 0, 17)  # 12..16 gone unread
        _step(stream, consumer, 22)
        admin.produce(topic, 0, [b"{}"] * 10, now_ms=0)  # 22..31
        admin.trim_before(topic, 0, 25)  # 22..24 gone
        _step(stream, consumer, 32)
        admin.produce(topic, 0, [b"{}"] * 9, now_ms=0)  # 32..40
        admin.trim_before(topic, 0, 41)  # everything gone: the stream resumes at 41
        _step(stream, consumer, 41)
        admin.produce(topic, 0, [b"{}"] * 5, now_ms=0)  # 41..45
        admin.trim_before(topic, 0, 44)  # 41..43 gone, right after the previous loss
        _step(stream, consumer, 46)
        assert consumer.phase is Phase.CONSUMING
        assert consumer.lost_ranges == [(12, 17), (22, 25), (32, 44)]
        assert consumer.stats.lost_offsets == 5 + 3 + 12
        kept = [*range(1, 12), *range(17, 22), *range(25, 32), 44, 45]
        assert list(consumer.offsets) == kept
        pairs = list(consumer.pairs())  # offsets and bytes, one chunk per fetch, zipped strictly
        assert [offset for offset, _ in pairs] == kept
        assert {value for offset, value in pairs if offset > 1} == {b"{}"}
    finally:
        consumer.stop()
        consumer.join(5)


def test_an_ended_consumer_logs_its_offsets_and_first_and_last_fetch_with_rows(topic, caplog):
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    stream = GatedStream(topic)
    consumer = _consumer(topic, RecordingClient(), stream)
    now = [1.0]
    consumer.clock = lambda: now[0]
    consumer.start()
    try:
        _step(stream, consumer, 2)  # the `topic` fixture's row, fetched at 1.000 s
        now[0] = 2.25  # meanwhile only empty fetches (no permit): they stamp nothing
        admin.produce(topic, 0, [b"{}"] * 3, now_ms=0)  # offsets 2..4
        _step(stream, consumer, 5)
    finally:
        with caplog.at_level("INFO", logger="tables.server.consumer"):
            consumer.stop()
            consumer.join(5)
    lines = [r.getMessage() for r in caplog.records if "consumed offsets" in r.getMessage()]
    assert lines == [
        "t__0__0__20240501T1030Z: consumed offsets [1, 5) (4 rows): rows fetched from 1000 to "
        "2250 ms, ended STOPPED"
    ]


def test_a_force_commit_or_a_stop_does_not_wait_out_a_blocked_fetch(topic):
    """Fetches that would wait 10 minutes for rows: the force commit (then the stop) wakes the
    partition's blocked XREAD (`StreamProvider.wake`), so both land within the waits' deadlines."""
    client = RecordingClient()
    consumer = _consumer(topic, client)
    consumer.fetch_timeout_ms = 600_000
    consumer.start()
    try:
        wait_until(lambda: consumer.next_offset == 2, what="the partition's row read")
        consumer.force_commit()
        wait_until(lambda: consumer.phase is Phase.HOLDING, timeout=30, what="asking to commit")
        assert consumer.end_reason == FORCE_COMMIT
    finally:
        consumer.stop()
    assert consumer.join(30)
