"""The IdealState change of a commit, pure."""

from __future__ import annotations

import pytest

from tables.domain.commit import CommitRejected, apply_commit
from tables.domain.idealstate import PauseState, new_realtime_idealstate, with_pause_state
from tables.domain.idealstate import with_paused_partitions as pause_partitions

SEG0 = "t__0__0__20240101T0000Z"
SEG1 = "t__0__1__20240101T0100Z"


def _ideal():
    record = new_realtime_idealstate("t_REALTIME", 2)
    record.map_fields = {
        SEG0: {"A": "CONSUMING", "B": "CONSUMING"},
        "t__1__0__20240101T0000Z": {"B": "CONSUMING", "C": "CONSUMING"},
    }
    return record


def test_the_committed_segment_goes_online_and_the_next_one_consumes():
    change = apply_commit(_ideal(), SEG0, SEG1, ["A", "B"])
    assert change.next_segment_added
    assert change.idealstate.map_fields[SEG0] == {"A": "ONLINE", "B": "ONLINE"}
    assert change.idealstate.map_fields[SEG1] == {"A": "CONSUMING", "B": "CONSUMING"}
    assert change.idealstate.simple_fields["NUM_PARTITIONS"] == "3"


def test_a_replica_that_stopped_consuming_still_goes_online():
    record = _ideal()
    record.map_fields[SEG0] = {"A": "CONSUMING", "B": "OFFLINE"}
    change = apply_commit(record, SEG0, SEG1, ["A", "B"])
    assert change.idealstate.map_fields[SEG0] == {"A": "ONLINE", "B": "ONLINE"}


def test_a_stale_commit_is_refused():
    record = _ideal()
    record.map_fields[SEG0] = {"A": "ONLINE", "B": "ONLINE"}
    with pytest.raises(CommitRejected, match="no CONSUMING replica"):
        apply_commit(record, SEG0, SEG1, ["A", "B"])
    with pytest.raises(CommitRejected, match="not in the IdealState"):
        apply_commit(_ideal(), "t__7__0__20240101T0000Z", None, [])


def test_a_paused_table_or_partition_gets_no_next_segment():
    paused = with_pause_state(_ideal(), PauseState(paused=True))
    change = apply_commit(paused, SEG0, SEG1, ["A", "B"])
    assert not change.next_segment_added
    assert SEG1 not in change.idealstate.map_fields
    assert change.idealstate.map_fields[SEG0] == {"A": "ONLINE", "B": "ONLINE"}
    only_p0 = pause_partitions(_ideal(), {0})
    assert not apply_commit(only_p0, SEG0, SEG1, ["A", "B"]).next_segment_added
    only_p1 = pause_partitions(_ideal(), {1})
    assert apply_commit(only_p1, SEG0, SEG1, ["A", "B"]).next_segment_added


def test_two_segments_for_one_partition_sequence_are_refused():
    record = _ideal()
    record.map_fields["t__0__1__20231231T2359Z"] = {"A": "OFFLINE"}
    with pytest.raises(CommitRejected, match="already holds partition 0 sequence 1"):
        apply_commit(record, SEG0, SEG1, ["A", "B"])


def test_the_input_record_is_not_modified():
    record = _ideal()
    apply_commit(record, SEG0, SEG1, ["A", "B"])
    assert record.map_fields[SEG0] == {"A": "CONSUMING", "B": "CONSUMING"}
    assert SEG1 not in record.map_fields


def test_the_input_record_is_left_as_it_was_and_untouched_entries_are_shared():
    record = _ideal()
    before = record.copy()
    change = apply_commit(record, SEG0, SEG1, ["A", "B"])
    assert record == before  # no side effect: the commit's entries were replaced in the copy
    other = "t__1__0__20240101T0000Z"
    assert change.idealstate.map_fields[other] is record.map_fields[other]  # not copied
    assert change.idealstate.map_fields is not record.map_fields
    assert change.idealstate.simple_fields is not record.simple_fields
