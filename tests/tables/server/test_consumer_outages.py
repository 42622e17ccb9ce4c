"""A consumer tells a stream outage (wait it out) from what waiting cannot fix (stop and say so).

- `StreamUnavailable` (Redis stalled or restarting) is retried with capped back-off: the consumer
  keeps CONSUMING and reads on once the stream answers, never calling segmentStoppedConsuming;
- a deleted topic (`TopicNotFound`) ends the segment in ERROR with the reason `topicNotFound`.
"""

from __future__ import annotations

import threading

from tables.domain.completion_response import Response, Status
from tables.server.consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from tables.streams.base import (
    MessageBatch,
    StreamMessage,
    StreamProvider,
    StreamUnavailable,
    TopicNotFound,
)
from tests.poll import wait_until

SPEC = ConsumingSegment("t_REALTIME", "t__0__3__20240501T1030Z", "topic", 0, 7, 1000, 3_600_000, 0)


class FlakyStream(StreamProvider):
    """Fails the first `outage` fetches with `error`, then serves offsets 7..9 once."""

    def __init__(self, outage: int, error: Exception) -> None:
        super().__init__("topic")
        self.outage, self.error = outage, error
        self.fetches = 0

    def partition_count(self) -> int:
        return 1

    def earliest_offset(self, partition: int) -> int:
        return 7

    def latest_offset(self, partition: int) -> int:
        return 10

    def fetch(self, partition: int, start: int, most: int, timeout_ms: int) -> MessageBatch:
        self.fetches += 1
        if self.fetches <= self.outage:
            raise self.error
        if start >= 10:
            threading.Event().wait(timeout_ms / 1000)  # a real stream blocks for the timeout
            return MessageBatch([], start, 7, False)
        messages = [StreamMessage(o, b"{}", 1) for o in range(start, 10)]
        return MessageBatch(messages, 10, 7, False)


class RecordingClient:
    def __init__(self) -> None:
        self.stopped: list[str] = []

    def segment_consumed(self, *args: object) -> Response:
        return Response(Status.HOLD)

    def segment_stopped_consuming(self, table, segment, offset, reason) -> Response:
        self.stopped.append(reason)
        return Response(Status.PROCESSED)


def _consumer(stream: FlakyStream, client: RecordingClient) -> SegmentConsumer:
    return SegmentConsumer(
        SPEC,
        stream,
        client,  # type: ignore[arg-type]
        lambda consumer, response: False,
        PartitionStats("t_REALTIME", "topic", 0),
        clock=lambda: 1.0,
        fetch_timeout_ms=20,
    )


def test_a_stream_outage_is_waited_out_not_reported():
    stream = FlakyStream(4, StreamUnavailable("Redis is not reachable: stalled"))
    client = RecordingClient()
    consumer = _consumer(stream, client)
    consumer.start()
    try:
        wait_until(lambda: consumer.next_offset == 10, timeout=30, what="rows after the outage")
        assert consumer.phase is Phase.CONSUMING
        assert consumer.rows == 3 and consumer.error is None
        assert client.stopped == []
        assert stream.fetches > 4
    finally:
        consumer.stop()
        consumer.join(5)


def test_a_deleted_topic_stops_the_segment_and_says_why():
    client = RecordingClient()
    consumer = _consumer(FlakyStream(1, TopicNotFound("topic 'topic' does not exist")), client)
    consumer.start()
    try:
        wait_until(lambda: consumer.phase is Phase.ERROR, timeout=30, what="the consumer failing")
        wait_until(lambda: client.stopped, timeout=10, what="segmentStoppedConsuming")
    finally:
        consumer.stop()
        consumer.join(5)
    assert client.stopped == ["topicNotFound: topic 'topic' does not exist"]
    assert consumer.error is not None and "TopicNotFound" in consumer.error
