"""The healer's decisions (tables.domain.healing): Pinot's repair cases in Pinot's order."""

from __future__ import annotations

from tables.domain.commit import is_partition_paused
from tables.domain.healing import (
    ErrorRepairKind,
    OffsetFrom,
    Repair,
    RepairKind,
    Resolved,
    SegmentFacts,
    plan_consuming_repairs,
    plan_error_repairs,
    start_offset,
)
from tables.domain.healing_apply import apply_repairs
from tables.domain.znrecord import ZNRecord

GUARD = 300_000
NOW = 10_000_000


def seg(p: int, s: int, t: str = "20261125T1200Z") -> str:
    return f"t__{p}__{s}__{t}"


def facts(name, status, start="0", end=None, mtime=NOW - GUARD - 1):
    return SegmentFacts(name, status, start, end, mtime)


def plan(ideal, segments, partitions=(0,), **kw):
    kw.setdefault("now_ms", NOW)
    kw.setdefault("max_completion_ms", GUARD)
    return plan_consuming_repairs(ideal, segments, stream_partitions=set(partitions), **kw)


def test_healthy_partition_needs_nothing():
    ideal = {seg(0, 0): {"a": "ONLINE"}, seg(0, 1): {"a": "CONSUMING"}}
    result = plan(ideal, [facts(seg(0, 0), "DONE", "0", "5"), facts(seg(0, 1), "IN_PROGRESS", "5")])
    assert result.repairs == [] and result.waits == [] and result.problems == []


def test_done_still_consuming_waits_for_the_guard_then_repairs_from_end_offset():
    ideal = {seg(0, 3): {"a": "CONSUMING", "b": "CONSUMING"}}
    fresh = facts(seg(0, 3), "DONE", "10", "20", mtime=NOW - 1000)
    waiting = plan(ideal, [fresh])
    assert waiting.repairs == []
    assert waiting.waits[0].until_ms == NOW - 1000 + GUARD
    assert waiting.waits[0].kind is RepairKind.COMMIT_STOPPED_AFTER_STEP1
    (repair,) = plan(ideal, [facts(seg(0, 3), "DONE", "10", "20")]).repairs
    assert repair.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP1
    assert (repair.new_from, repair.offset, repair.sequence) == (OffsetFrom.END, "20", 4)
    assert repair.to_online == (seg(0, 3),)


def test_a_pauseless_commit_stopped_after_step1_is_committing_not_done():
    """Pinot's statusPostStep1: COMMITTING for a pauseless table, so case 1 looks for it there
    (and a DONE latest still CONSUMING is not case 1 of a pauseless table)."""
    ideal = {seg(0, 3): {"a": "CONSUMING", "b": "CONSUMING"}}
    committing = [facts(seg(0, 3), "COMMITTING", "10", "20")]
    assert plan(ideal, committing).repairs == []
    (repair,) = plan(ideal, committing, pauseless=True).repairs
    assert repair.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP1
    assert (repair.offset, repair.sequence, repair.to_online) == ("20", 4, (seg(0, 3),))
    fresh = [facts(seg(0, 3), "COMMITTING", "10", "20", mtime=NOW - 5)]
    assert plan(ideal, fresh, pauseless=True).waits[0].until_ms == NOW - 5 + GUARD


def test_done_still_consuming_of_an_ended_partition_only_goes_online():
    ideal = {seg(1, 3): {"a": "CONSUMING"}}
    result = plan(ideal, [facts(seg(1, 3), "DONE", "10", "20")], partitions=(0,))
    (repair,) = [r for r in result.repairs if r.partition == 1]
    assert repair.kind is RepairKind.PARTITION_ENDED and repair.new_from is None


def test_partial_offline_only_behind_the_switch():
    ideal = {seg(0, 1): {"a": "CONSUMING", "b": "OFFLINE"}}
    segments = [facts(seg(0, 1), "IN_PROGRESS", "5")]
    assert plan(ideal, segments).repairs == []
    (repair,) = plan(ideal, segments, partial_offline_repair=True).repairs
    assert repair.kind is RepairKind.PARTIAL_OFFLINE and repair.to_consuming == ("b",)


def test_all_offline_starts_again_from_the_start_offset():
    ideal = {seg(0, 2): {"a": "OFFLINE", "b": "OFFLINE"}}
    (repair,) = plan(ideal, [facts(seg(0, 2), "IN_PROGRESS", "40")]).repairs
    assert repair.kind is RepairKind.ALL_REPLICAS_OFFLINE
    assert (repair.new_from, repair.offset, repair.sequence) == (OffsetFrom.START, "40", 3)


def test_all_online_done_gets_a_segment_from_the_end_offset():
    ideal = {seg(0, 2): {"a": "ONLINE"}}
    (repair,) = plan(ideal, [facts(seg(0, 2), "DONE", "40", "50")]).repairs
    assert repair.kind is RepairKind.NO_CONSUMING_SEGMENT and repair.offset == "50"


def test_mixed_states_without_consuming_are_a_problem_not_a_repair():
    ideal = {seg(0, 2): {"a": "ONLINE", "b": "OFFLINE"}}
    result = plan(ideal, [facts(seg(0, 2), "DONE", "40", "50")])
    assert result.repairs == [] and len(result.problems) == 1


def test_latest_missing_from_idealstate_adds_it_and_onlines_the_consuming_one():
    ideal = {seg(0, 1): {"a": "CONSUMING"}}
    segments = [facts(seg(0, 1), "DONE", "0", "9"), facts(seg(0, 2), "IN_PROGRESS", "9")]
    (repair,) = plan(ideal, segments).repairs
    assert repair.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP2
    assert repair.add_latest and repair.to_online == (seg(0, 1),) and not repair.data_loss
    assert plan({}, [facts(seg(0, 2), "IN_PROGRESS", "9")]).repairs[0].data_loss


def test_latest_missing_from_idealstate_waits_for_its_own_mtime():
    ideal = {seg(0, 1): {"a": "CONSUMING"}}
    segments = [
        facts(seg(0, 1), "DONE", "0", "9"),
        facts(seg(0, 2), "IN_PROGRESS", "9", mtime=NOW - 5),
    ]
    result = plan(ideal, segments)
    assert result.repairs == [] and result.waits[0].segment == seg(0, 2)


def test_a_half_done_commit_of_a_former_lead_controller_is_finished_at_once():
    """Written before the current lead controller took the table over (`takeover_ms`): the
    writer no longer leads it, so cases 1 and 4 and a stray are repaired without the guard;
    a write at or after the takeover still waits."""
    step1 = ({seg(0, 3): {"a": "CONSUMING"}}, [facts(seg(0, 3), "DONE", "10", "20", NOW - 900)])
    (repair,) = plan(*step1, takeover_ms=NOW - 899).repairs
    assert repair.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP1 and repair.offset == "20"
    assert plan(*step1, takeover_ms=NOW - 900).waits[0].until_ms == NOW - 900 + GUARD

    step2 = (
        {seg(0, 1): {"a": "CONSUMING"}},
        [facts(seg(0, 1), "DONE", "0", "9"), facts(seg(0, 2), "IN_PROGRESS", "9", mtime=NOW - 5)],
    )
    (repair,) = plan(*step2, takeover_ms=NOW - 4).repairs
    assert repair.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP2
    assert plan(*step2, takeover_ms=NOW - 6).repairs == []

    kept, stray = seg(0, 2, "20261125T1200Z"), seg(0, 2, "20261125T1201Z")
    race = (
        {kept: {"a": "CONSUMING"}},
        [facts(kept, "IN_PROGRESS", "9"), facts(stray, "IN_PROGRESS", "9", mtime=NOW - 10)],
    )
    assert plan(*race).repairs == []
    (repair,) = plan(*race, takeover_ms=NOW - 9).repairs
    assert repair.kind is RepairKind.DUPLICATE_SEQUENCE and repair.drop == (stray,)


def test_new_partitions_start_at_sequence_zero_from_earliest():
    result = plan({}, [], partitions=(0, 1))
    assert [(r.kind, r.partition, r.new_from) for r in result.repairs] == [
        (RepairKind.NEW_PARTITION, 0, OffsetFrom.EARLIEST),
        (RepairKind.NEW_PARTITION, 1, OffsetFrom.EARLIEST),
    ]


def test_unknown_stream_plans_no_new_partitions_and_assumes_partitions_exist():
    ideal = {seg(0, 2): {"a": "ONLINE"}}
    result = plan_consuming_repairs(
        ideal,
        [facts(seg(0, 2), "DONE", "40", "50")],
        stream_partitions=None,
        now_ms=NOW,
        max_completion_ms=GUARD,
    )
    assert [r.kind for r in result.repairs] == [RepairKind.NO_CONSUMING_SEGMENT]


def test_paused_partitions_are_left_alone():
    ideal = {seg(0, 2): {"a": "ONLINE"}}
    result = plan(ideal, [facts(seg(0, 2), "DONE", "40", "50")], paused_partitions={0})
    assert result.repairs == []


def test_duplicate_sequence_prefers_the_idealstate_one_and_drops_the_stray_after_the_guard():
    kept, stray = seg(0, 2, "20261125T1200Z"), seg(0, 2, "20261125T1201Z")
    ideal = {kept: {"a": "CONSUMING"}}
    result = plan(ideal, [facts(kept, "IN_PROGRESS", "9"), facts(stray, "IN_PROGRESS", "9")])
    (repair,) = result.repairs
    assert repair.kind is RepairKind.DUPLICATE_SEQUENCE and repair.drop == (stray,)


def test_start_offset_skips_to_earliest_on_data_loss():
    assert start_offset(10, 4) == (10, False)
    assert start_offset(10, 25) == (25, True)
    assert start_offset(10, None) == (10, False)


def _record(maps):
    return ZNRecord(id="t_REALTIME", map_fields={k: dict(v) for k, v in maps.items()})


def test_apply_step1_repair_onlines_old_and_adds_new():
    repair = plan({seg(0, 3): {"a": "CONSUMING"}}, [facts(seg(0, 3), "DONE", "1", "2")]).repairs[0]
    new, applied, dropped = apply_repairs(
        _record({seg(0, 3): {"a": "CONSUMING"}}),
        [Resolved(repair, seg(0, 4), ("a",))],
        is_partition_paused,
    )
    assert dropped == [] and len(applied) == 1
    assert new.map_fields == {seg(0, 3): {"a": "ONLINE"}, seg(0, 4): {"a": "CONSUMING"}}


def test_apply_refuses_when_a_commit_got_there_first():
    repair = plan({seg(0, 3): {"a": "CONSUMING"}}, [facts(seg(0, 3), "DONE", "1", "2")]).repairs[0]
    committed = _record(
        {seg(0, 3): {"a": "ONLINE"}, seg(0, 4, "20261125T1201Z"): {"a": "CONSUMING"}}
    )
    new, applied, dropped = apply_repairs(
        committed, [Resolved(repair, seg(0, 4), ("a",))], is_partition_paused
    )
    assert new is None and applied == [] and "no CONSUMING replica" in dropped[0][1]


def test_apply_never_makes_two_consuming_segments_in_a_partition():
    repair = Repair(RepairKind.ALL_REPLICAS_OFFLINE, 0, seg(0, 2), "r", OffsetFrom.START, "4", 3)
    record = _record({seg(0, 2): {"a": "OFFLINE"}, seg(0, 9): {"a": "CONSUMING"}})
    new, _, dropped = apply_repairs(
        record, [Resolved(repair, seg(0, 3), ("a",))], is_partition_paused
    )
    assert new is None and "CONSUMING segment now" in dropped[0][1]


def test_apply_respects_a_pause_that_landed():
    repair = Repair(RepairKind.NO_CONSUMING_SEGMENT, 0, seg(0, 2), "r", OffsetFrom.END, "4", 3)
    record = _record({seg(0, 2): {"a": "ONLINE"}})
    record.simple_fields["pausedPartitions"] = "[0]"
    new, _, dropped = apply_repairs(
        record, [Resolved(repair, seg(0, 3), ("a",))], is_partition_paused
    )
    assert new is None and "paused" in dropped[0][1]


def test_error_repairs_follow_pinot():
    ideal = {
        seg(0, 1): {"a": "ONLINE", "b": "ONLINE"},
        seg(0, 2): {"a": "CONSUMING", "b": "CONSUMING"},
        seg(1, 2): {"a": "CONSUMING", "b": "CONSUMING"},
        seg(2, 2): {"a": "CONSUMING"},
    }
    external = {
        seg(0, 1): {"a": "ERROR", "b": "ONLINE"},  # DONE, one ERROR: reset
        seg(0, 2): {"a": "ERROR", "b": "CONSUMING"},  # IN_PROGRESS, some ERROR: untouched
        seg(1, 2): {"a": "ERROR", "b": "ERROR"},  # IN_PROGRESS, all ERROR: reset
        seg(2, 2): {"a": "ERROR"},  # no metadata: skipped
    }
    statuses = {seg(0, 1): "DONE", seg(0, 2): "IN_PROGRESS", seg(1, 2): "IN_PROGRESS"}
    repairs, all_error = plan_error_repairs(ideal, external, statuses)
    assert all_error == 2
    assert [(r.kind, r.segment, r.instances) for r in repairs] == [
        (ErrorRepairKind.RESET, seg(0, 1), ("a", "b")),
        (ErrorRepairKind.RESET, seg(1, 2), ("a", "b")),
    ]
