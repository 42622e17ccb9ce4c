"""A reconcile round hands the transitions that start consumers to the transition pool first
(`tables.server.instance`): at a commit the next segment's consumer is the partition's
freshness; the previous segment's ONLINE transition comes after it, whatever the names' order."""

from __future__ import annotations

from tables import builds
from tables.cluster import context
from tables.domain.segment_states import SegmentState
from tables.domain.znrecord import ZNRecord
from tables.server.instance import ServerInstance
from tables.server.replica import Replica

TABLE = "events_REALTIME"
DONE = "events__0__1__20260101T0000Z"  # sorts before its successor
NEXT = "events__0__2__20260101T0000Z"
OTHER_NEXT = "events__1__2__20260101T0000Z"
DROPPED = "events__0__0__20260101T0000Z"


class _Pool:
    def __init__(self) -> None:
        self.submitted: list[tuple[str, tuple[SegmentState | None, SegmentState]]] = []

    def submit(self, _fn, _table, segment, _replica, step) -> None:
        self.submitted.append((segment, step))


def _no_build(*args: object) -> None:
    raise AssertionError("no build here")


def test_consumers_start_first(tmp_path):
    instance = ServerInstance(
        "Server_a_1", "127.0.0.1", 1, context.current, builds.deep_store, _no_build, tmp_path
    )
    pool = instance._pool = _Pool()
    ideal = ZNRecord(TABLE)
    ideal.map_fields.update(
        {
            DONE: {"Server_a_1": "ONLINE"},
            NEXT: {"Server_a_1": "CONSUMING"},
            OTHER_NEXT: {"Server_a_1": "CONSUMING"},
        }
    )
    instance._ideal[TABLE] = ideal
    instance._serves[TABLE] = True
    instance.replicas[TABLE] = {
        DONE: Replica(state=SegmentState.CONSUMING),
        DROPPED: Replica(state=SegmentState.ONLINE),
    }
    instance._reconcile(TABLE)
    targets = [step[1] for _segment, step in pool.submitted]
    assert sorted(segment for segment, _ in pool.submitted) == [DROPPED, DONE, NEXT, OTHER_NEXT]
    assert targets[:2] == [SegmentState.CONSUMING, SegmentState.CONSUMING]
    assert [segment for segment, _ in pool.submitted[:2]] == [NEXT, OTHER_NEXT]
