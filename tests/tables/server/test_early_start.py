"""A pauseless consumer asks for the early commit start (`startCommit`) unless its build is held;
a blocking one never does (tables.server.consumer). Fakes for the stream and the controller:
what is tested is the consumer's own decision."""

from __future__ import annotations

import pytest

from tables.domain.completion_response import Response, Status
from tables.domain.segment_states import FORCE_COMMIT, ROW_LIMIT
from tables.server.consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from tables.streams.base import MessageBatch, StreamProvider
from tests.poll import wait_until
from tests.tables.server.test_messages import force_commit_empty


class AskingClient:
    """Records each segmentConsumed's early-start flag; answers COMMIT."""

    def __init__(self) -> None:
        self.asked: list[bool] = []

    def segment_consumed(self, table, segment, offset, reason, row_count, start=False):
        self.asked.append(start)
        return Response(Status.COMMIT, offset=str(offset), build_time_sec=60)


class Commit:
    """The commit callable: records whether the consumer had asked early when COMMIT came."""

    def __init__(self, hold: object | None) -> None:
        self.hold = hold
        self.saw_early: list[bool] = []

    def __call__(self, consumer: SegmentConsumer, response: Response) -> bool:
        self.saw_early.append(consumer.early_start)
        return True

    def build_hold(self, spec: ConsumingSegment) -> object | None:
        return self.hold


@pytest.mark.parametrize(
    ("pauseless", "hold", "asks"),
    [(True, None, True), (True, "held: deterministic failure", False), (False, None, False)],
    ids=["pauseless", "pauseless-held", "blocking"],
)
def test_the_consumer_asks_for_the_early_start_only_when_it_will_build(pauseless, hold, asks):
    spec = ConsumingSegment(
        "t_REALTIME", "t__0__3__20240501T1030Z", "topic", 0, 7, 1000, 3_600_000, 0, pauseless
    )
    client, commit = AskingClient(), Commit(hold)
    consumer = force_commit_empty(spec, client, commit)
    assert client.asked == [asks]
    assert commit.saw_early == [asks]
    assert consumer.end_reason == FORCE_COMMIT


# --- the first ask's hold, read ahead (tables.server.hold_ahead) ---------------------------------
class Trickle(StreamProvider):
    """Offsets 7.. in fetches of at most 3 rows; counts the offsets handed out."""

    def __init__(self) -> None:
        super().__init__("topic")
        self.handed = 0

    def partition_count(self) -> int:
        return 1

    def earliest_offset(self, partition: int) -> int:
        return 7

    def latest_offset(self, partition: int) -> int:
        return 7 + self.handed

    def fetch(self, partition: int, start: int, most: int, timeout_ms: int) -> MessageBatch:
        count = min(most, 3)
        self.handed = start - 7 + count
        offsets = list(range(start, start + count))
        return MessageBatch.of_columns(
            offsets, [b"{}"] * count, [0] * count, start + count, 7, False
        )


class AheadCommit(Commit):
    """Also answers `build_hold_soon`: records how far the stream was when it was asked."""

    def __init__(self, hold: object | None, stream: Trickle) -> None:
        super().__init__(hold)
        self.stream = stream
        self.soon_at: list[int] = []
        self.sync_asks = 0

    def build_hold(self, spec: ConsumingSegment) -> object | None:
        self.sync_asks += 1
        return self.hold

    def build_hold_soon(self, spec: ConsumingSegment):
        self.soon_at.append(self.stream.handed)
        return lambda: self.hold


@pytest.mark.parametrize(("hold", "asks"), [(None, True), ("held", False)], ids=["free", "held"])
def test_the_first_ask_uses_the_hold_read_before_the_end(hold, asks):
    spec = ConsumingSegment(
        "t_REALTIME", "t__0__3__20240501T1030Z", "topic", 0, 7, 40, 3_600_000, 0, True
    )
    stream, client = Trickle(), AskingClient()
    commit = AheadCommit(hold, stream)
    consumer = SegmentConsumer(
        spec,
        stream,
        client,  # type: ignore[arg-type]
        commit,
        PartitionStats(spec.table, spec.topic, spec.partition),
        clock=lambda: 1.0,  # far inside the window: the 40 rows end it
    )
    consumer.start()
    try:
        wait_until(lambda: consumer.phase is Phase.COMMITTED, what="the segment committed")
    finally:
        consumer.stop()
        consumer.join(5)
    assert consumer.end_reason == ROW_LIMIT
    assert commit.soon_at == [39]  # sent once, within 2 rows (5 %) of the 40, before the end
    assert commit.sync_asks == 0  # the first ask waited for nothing more
    assert client.asked == [asks]
