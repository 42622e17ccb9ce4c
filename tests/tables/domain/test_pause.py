"""Pause and resume decisions (tables.domain.pause): pure, no ZooKeeper."""

from __future__ import annotations

import json

import pytest

from tables.domain import pause as p
from tables.domain.idealstate import (
    PauseState,
    ReasonCode,
    java_timestamp_text,
    pause_state,
    paused_partitions,
    with_pause_state,
    with_paused_partitions,
)
from tables.domain.znrecord import ZNRecord

NOW = 1_714_561_333_417  # 2024-05-01 11:02:13.417 UTC


def seg(partition: int, sequence: int) -> str:
    return f"t__{partition}__{sequence}__20240501T1030Z"


def ideal(**segments: dict[str, str]) -> ZNRecord:
    return ZNRecord(id="t_REALTIME", map_fields={k: dict(v) for k, v in segments.items()})


def record_of(*entries: tuple[str, dict[str, str]]) -> ZNRecord:
    return ZNRecord(id="t_REALTIME", map_fields={name: dict(r) for name, r in entries})


CONS = {"s1": "CONSUMING", "s2": "CONSUMING"}
DONE = {"s1": "ONLINE", "s2": "ONLINE"}


def replicas(partition: int) -> list[str]:
    return ["s1", "s2"]


def test_consume_from_is_parsed_case_insensitively():
    assert p.parse_consume_from(None) is p.ConsumeFrom.LAST_CONSUMED
    assert p.parse_consume_from("") is p.ConsumeFrom.LAST_CONSUMED
    assert p.parse_consume_from("SMALLEST") is p.ConsumeFrom.SMALLEST
    assert p.parse_consume_from("lastconsumed") is p.ConsumeFrom.LAST_CONSUMED
    with pytest.raises(ValueError, match="lastConsumed, smallest, largest"):
        p.parse_consume_from("earliest")


def test_java_timestamps_round_trip():
    for ms in (NOW, NOW - 417, NOW - 17, 0):
        assert p.parse_java_timestamp(java_timestamp_text(ms)) == ms
    assert p.parse_java_timestamp("") is None
    assert p.parse_java_timestamp("yesterday") is None


def test_a_pause_writes_both_fields_and_a_repeat_writes_nothing():
    record = record_of((seg(0, 0), CONS))
    paused = p.paused_record(record, "swap topic", NOW)
    assert paused is not None
    state = json.loads(paused.simple_fields["pauseState"])
    assert state == {
        "paused": True,
        "reasonCode": "ADMINISTRATIVE",
        "comment": "swap topic",
        "timeInMillis": "2024-05-01 11:02:13.417",
        "indexOfInactiveTopics": [],
    }
    assert paused.simple_fields["isTablePaused"] == "true"
    assert p.paused_record(paused, "again", NOW + 5) is None  # keeps "paused since"
    # A quota pause is replaced by the administrative one.
    quota = with_pause_state(record, PauseState(True, ReasonCode.STORAGE_QUOTA_EXCEEDED))
    replaced = p.paused_record(quota, None, NOW)
    assert replaced is not None
    assert pause_state(replaced).reason_code == "ADMINISTRATIVE"


def test_stamps_only_move_forward():
    record = p.paused_record(record_of(), "a", NOW)
    assert record is not None
    resumed = p.resumed_flag(record, None, NOW - 60_000)  # a controller whose clock is behind
    assert pause_state(resumed).time_in_millis == java_timestamp_text(NOW + 1)
    again = p.paused_record(resumed, "b", NOW + 10)
    assert again is not None
    assert pause_state(again).time_in_millis == java_timestamp_text(NOW + 10)


def test_partition_pause_leaves_the_table_flag_alone():
    record = record_of((seg(0, 0), CONS), (seg(1, 0), CONS))
    paused = p.paused_record(record, None, NOW, frozenset({1}))
    assert paused is not None
    assert paused_partitions(paused) == {1}
    assert not pause_state(paused).paused
    assert p.paused_record(paused, None, NOW, frozenset({1})) is None
    assert paused_partitions(p.paused_record(paused, None, NOW, frozenset({0, 3}))) == {0, 1, 3}


def test_pause_status_details_have_pinots_shape():
    record = with_pause_state(record_of(), PauseState(True, comment=None, time_in_millis="x"))
    assert p.pause_status_details(record, [seg(1, 0), seg(0, 0)]) == {
        "pauseFlag": True,
        "consumingSegments": [seg(0, 0), seg(1, 0)],
        "reasonCode": "ADMINISTRATIVE",
        "comment": "Table is paused.",
        "timestamp": "x",
    }
    legacy = ZNRecord(id="t", simple_fields={"isTablePaused": "false"})
    body = p.pause_status_details(with_paused_partitions(legacy, {2}), [])
    assert (body["pauseFlag"], body["comment"], body["timestamp"]) == (
        False,
        "Table is unpaused.",
        "",
    )
    assert body["pausedPartitions"] == [2]


def tails(**by_partition: tuple[str, str, int | None, int | None]) -> dict[int, p.PartitionTail]:
    return {int(k[1:]): p.PartitionTail(*v) for k, v in by_partition.items()}


STREAMS = {0: p.OffsetRange(100, 500), 1: p.OffsetRange(0, 80), 2: p.OffsetRange(0, 10)}


def plan(record, tail_map, consume_from=p.ConsumeFrom.LAST_CONSUMED, **kwargs):
    return p.plan_resume(record, "t", tail_map, STREAMS, consume_from, replicas, NOW, **kwargs)


def test_last_consumed_starts_where_consumption_stopped():
    record = record_of((seg(0, 4), DONE), (seg(1, 2), DONE), (seg(2, 0), DONE))
    t = tails(
        p0=(seg(0, 4), "DONE", 50, 300),
        p1=(seg(1, 2), "DONE", 0, 80),
        p2=(seg(2, 0), "DONE", 0, 10),
    )
    made = plan(record, t).segments
    assert [(s.partition, s.start_offset, s.skip_reason) for s in made] == [
        (0, 300, None),
        (1, 80, None),
        (2, 10, None),
    ]
    assert made[0].segment == "t__0__5__20240501T1102Z"  # sequence + 1, created now (UTC minute)
    assert made[0].replicas == ("s1", "s2")
    resumed = p.apply_resume(record, plan(record, t))
    assert resumed.map_fields["t__0__5__20240501T1102Z"] == {"s1": "CONSUMING", "s2": "CONSUMING"}
    assert resumed.simple_fields["NUM_PARTITIONS"] == "6"


def test_an_offset_the_stream_dropped_is_data_loss():
    record = record_of((seg(0, 4), DONE))
    t = tails(p0=(seg(0, 4), "DONE", 0, 40))
    (made,) = plan(record, t, partitions=frozenset({0})).segments
    assert (made.start_offset, made.wanted_offset, made.skip_reason) == (100, 40, "dataLoss")
    assert made.skipped == 60
    assert made.custom_map() == {p.PREVIOUS_OFFSET: "40", p.START_REASON: "dataLoss"}
    assert p.ResumePlan((made,)).data_loss == 60


def test_largest_skips_and_smallest_replays():
    record = record_of((seg(0, 4), DONE))
    t = tails(p0=(seg(0, 4), "DONE", 50, 300))
    (largest,) = plan(record, t, p.ConsumeFrom.LARGEST, partitions=frozenset({0})).segments
    assert (largest.start_offset, largest.skip_reason, largest.skipped) == (500, "largest", 200)
    assert p.ResumePlan((largest,)).data_loss == 0  # a choice, not a loss
    (smallest,) = plan(record, t, p.ConsumeFrom.SMALLEST, partitions=frozenset({0})).segments
    assert (smallest.start_offset, smallest.skip_reason, smallest.skipped) == (100, "smallest", 0)
    # A replay, not a skip: recorded so that the ledger excuses the rows consumed twice.
    assert smallest.custom_map() == {p.PREVIOUS_OFFSET: "300", p.START_REASON: "smallest"}


def test_an_offset_beyond_the_stream_means_another_topic():
    record = record_of((seg(1, 2), DONE))
    t = tails(p1=(seg(1, 2), "DONE", 0, 900))
    (made,) = plan(record, t, partitions=frozenset({1})).segments
    assert (made.start_offset, made.skip_reason, made.skipped) == (0, "topicChanged", 0)


def test_consuming_paused_or_moved_partitions_get_nothing():
    record = record_of((seg(0, 4), CONS), (seg(1, 2), DONE), (seg(2, 0), DONE))
    record = with_paused_partitions(record, {2})
    t = tails(p0=(seg(0, 4), "IN_PROGRESS", 50, None), p1=(seg(1, 1), "DONE", 0, 70))
    assert plan(record, t).segments == ()  # 0 consumes, 1 moved on since read, 2 paused
    paused = with_pause_state(record_of((seg(1, 2), DONE)), PauseState(True))
    assert plan(paused, tails(p1=(seg(1, 2), "DONE", 0, 80))).segments == ()


def test_a_segment_that_never_finished_is_replaced_from_its_start():
    record = record_of((seg(1, 2), {"s1": "OFFLINE", "s2": "OFFLINE"}))
    t = tails(p1=(seg(1, 2), "IN_PROGRESS", 60, None))
    (made,) = plan(record, t, partitions=frozenset({1})).segments
    assert (made.segment, made.start_offset) == ("t__1__3__20240501T1102Z", 60)


def test_a_partition_without_segments_starts_by_the_tables_reset_criteria():
    made = plan(record_of(), {}, default_criteria="smallest", partitions=frozenset({0})).segments
    assert [(s.segment, s.start_offset) for s in made] == [("t__0__0__20240501T1102Z", 100)]
    made = plan(record_of(), {}, default_criteria="largest", partitions=frozenset({0})).segments
    assert made[0].start_offset == 500


def test_after_a_topic_swap_last_consumed_starts_at_the_new_topics_earliest():
    record = p.with_stream_change(record_of((seg(0, 4), DONE)), "redis:a", "redis:b", NOW)
    t = tails(p0=(seg(0, 4), "DONE", 50, 300))
    (made,) = plan(record, t, partitions=frozenset({0})).segments
    assert (made.start_offset, made.wanted_offset, made.skip_reason) == (100, 300, "topicChanged")
    assert made.skipped == 0  # another topic's offsets: nothing skipped in this one
    (largest,) = plan(record, t, p.ConsumeFrom.LARGEST, partitions=frozenset({0})).segments
    # An explicit choice still applies; what it skips is counted in the new topic.
    assert (largest.start_offset, largest.wanted_offset, largest.skipped) == (500, 100, 400)
    assert p.STREAM_CHANGED not in p.without_stream_change(record).simple_fields
