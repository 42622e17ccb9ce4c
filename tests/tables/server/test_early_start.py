"""A pauseless consumer asks for the early commit start (`startCommit`) unless its build is held;
a blocking one never does (tables.server.consumer). Fakes for the stream and the controller:
what is tested is the consumer's own decision."""

from __future__ import annotations

import pytest

from tables.domain.completion_response import Response, Status
from tables.domain.segment_states import FORCE_COMMIT
from tables.server.consumer import ConsumingSegment, SegmentConsumer
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
