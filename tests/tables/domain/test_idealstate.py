"""IdealState helpers and the pause state, pure."""

from __future__ import annotations

import json

from tables.domain import idealstate as ist
from tables.domain.znrecord import ZNRecord


def test_a_new_realtime_idealstate_has_pinots_simple_fields():
    record = ist.new_realtime_idealstate("myTable_REALTIME", 2)
    assert record.simple_fields == {
        "IDEAL_STATE_MODE": "CUSTOMIZED",
        "REBALANCE_MODE": "CUSTOMIZED",
        "NUM_PARTITIONS": "0",
        "REPLICAS": "2",
        "MAX_PARTITIONS_PER_INSTANCE": "1",
        "STATE_MODEL_DEF_REF": "SegmentOnlineOfflineStateModel",
        "STATE_MODEL_FACTORY_NAME": "DEFAULT",
        "INSTANCE_GROUP_TAG": "myTable_REALTIME",
        "isTablePaused": "false",
    }


def test_finalize_counts_segments_and_compresses_past_a_thousand():
    record = ist.new_realtime_idealstate("t_REALTIME", 1)
    record.simple_fields["BATCH_MESSAGE_MODE"] = "true"
    record.map_fields = {f"t__0__{i}__20240101T0000Z": {"S": "ONLINE"} for i in range(1000)}
    small = ist.finalize_for_write(record)
    assert small.simple_fields["NUM_PARTITIONS"] == "1000"
    assert small.simple_fields["BATCH_MESSAGE_MODE"] == "false"
    assert "enableCompression" not in small.simple_fields
    record.map_fields["t__0__1000__20240101T0000Z"] = {"S": "CONSUMING"}
    big = ist.finalize_for_write(record)
    assert big.simple_fields["enableCompression"] == "true"
    assert ist.finalize_for_write(small).simple_fields.get("enableCompression") is None


def test_pause_state_is_written_to_both_fields():
    record = ist.new_realtime_idealstate("t_REALTIME", 1)
    state = ist.PauseState(
        paused=True, comment="swap topic", time_in_millis=ist.java_timestamp_text(1714561333417)
    )
    paused = ist.with_pause_state(record, state)
    assert paused.simple_fields["isTablePaused"] == "true"
    assert json.loads(paused.simple_fields["pauseState"]) == {
        "paused": True,
        "reasonCode": "ADMINISTRATIVE",
        "comment": "swap topic",
        "timeInMillis": "2024-05-01 11:02:13.417",
        "indexOfInactiveTopics": [],
    }
    assert ist.pause_state(paused) == state
    assert record.simple_fields["isTablePaused"] == "false"  # the input is not modified


def test_reading_prefers_pause_state_and_falls_back_to_the_legacy_flag():
    legacy = ZNRecord(id="t_REALTIME", simple_fields={"isTablePaused": "true"})
    assert ist.pause_state(legacy).paused
    assert ist.pause_state(legacy).reason_code == "ADMINISTRATIVE"
    broken = ZNRecord(id="t", simple_fields={"pauseState": "{not json", "isTablePaused": "true"})
    assert ist.pause_state(broken).paused
    both = ZNRecord(
        id="t", simple_fields={"pauseState": '{"paused":false}', "isTablePaused": "true"}
    )
    assert not ist.pause_state(both).paused


def test_a_table_level_change_keeps_inactive_topics():
    record = ist.with_pause_state(
        ist.new_realtime_idealstate("t_REALTIME", 1),
        ist.PauseState(paused=False, index_of_inactive_topics=(1,)),
    )
    resumed = ist.with_pause_state(record, ist.PauseState(paused=True))
    assert ist.pause_state(resumed).index_of_inactive_topics == (1,)


def test_java_timestamp_text_trims_like_java():
    assert ist.java_timestamp_text(1714561333400) == "2024-05-01 11:02:13.4"
    assert ist.java_timestamp_text(1714561333000) == "2024-05-01 11:02:13.0"
    assert ist.java_timestamp_text(1714561333007) == "2024-05-01 11:02:13.007"


def test_paused_partitions_round_trip_and_vanish_when_empty():
    record = ist.new_realtime_idealstate("t_REALTIME", 1)
    some = ist.with_paused_partitions(record, {3, 0})
    assert some.simple_fields["pausedPartitions"] == "[0,3]"
    assert ist.paused_partitions(some) == {0, 3}
    assert "pausedPartitions" not in ist.with_paused_partitions(some, set()).simple_fields


def test_consuming_segments_and_segments_of_a_partition():
    record = ist.new_realtime_idealstate("t_REALTIME", 2)
    record.map_fields = {
        "t__1__0__20240101T0000Z": {"A": "ONLINE", "B": "ONLINE"},
        "t__1__1__20240101T0100Z": {"A": "CONSUMING", "B": "OFFLINE"},
        "t__0__0__20240101T0000Z": {"A": "OFFLINE", "B": "OFFLINE"},
        "uploaded__t__1__20240101T0000Z__x": {"A": "ONLINE"},
    }
    assert ist.consuming_segments(record) == ["t__1__1__20240101T0100Z"]
    assert ist.segments_of_partition(record, 1) == [
        "t__1__0__20240101T0000Z",
        "t__1__1__20240101T0100Z",
    ]
