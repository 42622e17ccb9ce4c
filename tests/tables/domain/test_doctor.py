"""The ingestion doctor (tables.domain.doctor): why a partition is not consuming."""

from __future__ import annotations

from datetime import UTC, datetime

from tables.domain.doctor import (
    STEP_GRACE_MS,
    Action,
    HealerTiming,
    PartitionView,
    ReplicaReport,
    SegmentView,
    Source,
    clock,
    custom_map,
    diagnose,
    outlook,
)

GUARD = 300_000
NOW = int(datetime(2026, 11, 25, 12, 10, 0, tzinfo=UTC).timestamp() * 1000)
A, B = "Server_a_7001", "Server_b_7002"


def name(partition: int, sequence: int) -> str:
    return f"events__{partition}__{sequence}__20261125T1200Z"


def segment(partition, sequence, status, ideal=None, external=None, mtime=NOW - 60_000, **kw):
    ideal = {A: "ONLINE", B: "ONLINE"} if ideal is None else ideal
    return SegmentView(
        name(partition, sequence),
        status,
        kw.pop("start", str(sequence * 100)),
        kw.pop("end", "" if status == "IN_PROGRESS" else str(sequence * 100 + 100)),
        mtime,
        ideal,
        dict(ideal) if external is None else external,
        **kw,
    )


def consuming(partition=0, sequence=1, **kw):
    states = {A: "CONSUMING", B: "CONSUMING"}
    return segment(partition, sequence, "IN_PROGRESS", kw.pop("ideal", states), **kw)


def report(server, phase="CONSUMING", **kw):
    kw.setdefault("consumer_state", "NOT_CONSUMING" if phase == "ERROR" else "CONSUMING")
    kw.setdefault("current_offset", 150)
    kw.setdefault("upstream_offset", 160)
    return ReplicaReport(server, phase, updated_ms=NOW - 1000, **kw)


def view(*segments, partition=0, **kw):
    kw.setdefault("replicas", {A: "CONSUMING", B: "CONSUMING"})
    kw.setdefault("verdict", "CONSUMING")
    kw.setdefault("stream_partitions", 1)
    return PartitionView("events_REALTIME", partition, segments, **kw)


def timing(**kw):
    kw.setdefault("max_completion_ms", GUARD)
    return HealerTiming(NOW, **kw)


def texts(diagnosis, source=None):
    return [e.text for e in diagnosis.evidence if source is None or e.source == source]


# --- healthy ------------------------------------------------------------------------------------


def test_a_consuming_partition_reads_consuming_normally():
    found = diagnose(
        view(
            segment(0, 0, "DONE"),
            consuming(),
            reports=[report(A), report(B)],
            verdict_detail="12.5 rows/s, 10 records behind",
        ),
        timing(),
    )
    assert found.healthy and found.kind == "healthy"
    assert found.headline == "consuming normally: 12.5 rows/s, 10 records behind"
    assert found.fix == "" and found.actions == ()
    assert f"{name(0, 1)}: {A} CONSUMING, {B} CONSUMING" in texts(found, Source.IDEALSTATE)
    assert f"{A}: CONSUMING (CONSUMING) at offset 150 of 160" in texts(found, Source.SERVER)
    assert "latest offset of partition 0: 160 (as the replicas last saw it)" in texts(found)


def test_a_commit_in_progress_is_healthy():
    found = diagnose(
        view(consuming(), verdict="COMMITTING", verdict_detail="commit for 3 s"), timing()
    )
    assert found.healthy and found.headline == "committing normally: commit for 3 s"


# --- the controller died between commit steps -------------------------------------------------


def test_controller_died_after_step_1_waits_for_the_guard_then_the_healer_repairs():
    done = segment(0, 1, "DONE", {A: "CONSUMING", B: "CONSUMING"}, mtime=NOW - 60_000)
    found = diagnose(view(segment(0, 0, "DONE"), done), timing())
    assert not found.healthy and found.kind == "commitStoppedAfterStep1"
    assert found.headline == (
        f"{name(0, 1)} DONE at 12:09:00 UTC but still CONSUMING in the IdealState: the controller "
        "stopped between commit steps"
    )
    assert found.due_ms == NOW - 60_000 + GUARD
    assert found.fix.startswith(
        "the healer will repair it at 12:14:00 UTC (guard: max.segment.completion.time.millis "
        "5 min 00 s after the metadata was written)"
    )
    assert found.actions == (Action.RUN_HEALER,) and found.segment == name(0, 1)
    assert found.next_step == "the healer acts at 12:14:00 UTC (guard), or Run healer now"
    metadata = [e for e in found.evidence if e.source == Source.METADATA]
    assert metadata[0].text.startswith(f"{name(0, 1)}: status DONE, offsets 100 to 200")
    assert metadata[0].at_text == "12:09:00 UTC"

    overdue = segment(0, 1, "DONE", {A: "CONSUMING", B: "CONSUMING"}, mtime=NOW - GUARD - 1)
    repaired = diagnose(view(overdue), timing())
    assert repaired.due_ms == NOW
    assert "within seconds" in repaired.fix and "a new segment starts at its end offset 200" in (
        repaired.fix
    )
    assert repaired.fix.endswith("or Run healer now")


def test_a_done_segment_seconds_old_may_be_a_commit_still_finishing():
    done = segment(0, 1, "DONE", {A: "CONSUMING"}, mtime=NOW - STEP_GRACE_MS + 1000)
    found = diagnose(view(done, replicas={A: "CONSUMING"}), timing())
    assert "a commit is finishing its last steps" in found.headline


def test_controller_died_after_step_2_names_the_segment_missing_from_the_idealstate():
    done = segment(0, 1, "DONE", {A: "CONSUMING", B: "CONSUMING"}, mtime=NOW - GUARD - 5000)
    created = segment(0, 2, "IN_PROGRESS", {}, {}, mtime=NOW - GUARD - 4000, start="200")
    found = diagnose(view(done, created), timing())
    assert found.kind == "commitStoppedAfterStep2"
    assert found.headline == (
        f"{name(0, 2)} created at 12:04:56 UTC but not in the IdealState: the controller stopped "
        "after commit step 2"
    )
    assert found.fix.endswith(
        f"{name(0, 1)} goes ONLINE and {name(0, 2)} is added CONSUMING; or Run healer now"
    )
    assert f"{name(0, 2)}: not in it" in texts(found, Source.IDEALSTATE)
    assert found.due_ms == NOW and Action.RUN_HEALER in found.actions


def test_without_mirror_triggered_runs_the_fix_waits_for_the_scheduled_run():
    done = segment(0, 1, "DONE", {A: "CONSUMING"}, mtime=NOW - GUARD - 1)
    found = diagnose(
        view(done), timing(mirror_triggers=False, next_run_ms=NOW + 120_000, last_run_ms=NOW - 1)
    )
    assert "on its next scheduled run at 12:12:00 UTC" in found.fix
    healer = texts(found, Source.HEALER)
    assert healer == ["last run on this table", "next scheduled run"]
    assert [e.at_text for e in found.evidence if e.source == Source.HEALER] == [
        "12:09:59 UTC",
        "12:12:00 UTC",
    ]


# --- servers stopped consuming ------------------------------------------------------------------


def test_all_replicas_offline_shows_why_the_servers_stopped():
    offline = segment(0, 1, "IN_PROGRESS", {A: "OFFLINE", B: "OFFLINE"})
    reason = "topicNotFound: topic 'events' does not exist"
    found = diagnose(
        view(
            segment(0, 0, "DONE"),
            offline,
            replicas={A: "OFFLINE", B: "OFFLINE"},
            reports=[report(A, "ERROR", stopped_reason=reason)],
            verdict="MISSING_CONSUMING_SEGMENT",
        ),
        timing(),
    )
    assert found.kind == "allReplicasOffline"
    assert found.headline == (
        f"every replica of {name(0, 1)} is OFFLINE: the servers stopped consuming ({A}: {reason})"
    )
    assert f"a new segment consumes again from {name(0, 1)}'s start offset 100" in found.fix
    assert f"{A}: ERROR (NOT_CONSUMING) at offset 150 of 160; stopped: {reason}" in texts(found)
    assert f"{B}: no recent live state" in texts(found, Source.SERVER)


def test_no_consuming_segment_after_a_deleted_one():
    found = diagnose(
        view(segment(0, 0, "DONE"), segment(0, 1, "DONE"), verdict="MISSING_CONSUMING_SEGMENT"),
        timing(),
    )
    assert found.kind == "noConsumingSegment"
    assert found.headline.startswith(f"no CONSUMING segment after {name(0, 1)} (DONE, ONLINE)")
    assert f"a new segment starts at {name(0, 1)}'s end offset 200" in found.fix


def test_a_new_stream_partition_without_a_segment():
    found = diagnose(
        view(partition=3, stream_partitions=4, replicas={}, verdict="MISSING_CONSUMING_SEGMENT"),
        timing(),
    )
    assert found.kind == "newPartition"
    assert found.headline == "stream partition 3 has no segment yet (the stream has 4 partitions)"
    assert "earliest offset" in found.fix and found.due_ms == NOW
    assert "4 partition(s)" in texts(found, Source.STREAM)


def test_an_ended_partition_is_not_a_problem():
    found = diagnose(
        view(segment(5, 3, "DONE"), partition=5, stream_partitions=4, replicas={A: "ONLINE"}),
        timing(),
    )
    assert found.healthy and found.kind == "partitionEnded"


# --- ERROR replicas -----------------------------------------------------------------------------


def test_an_error_replica_of_a_committed_segment_is_reset_by_the_healer():
    broken = segment(0, 0, "DONE", external={A: "ERROR", B: "ONLINE"})
    found = diagnose(
        view(broken, consuming(), reports=[report(A), report(B)]),
        timing(),
    )
    assert found.kind == "errorReset" and found.segment == name(0, 0)
    assert found.headline == f"{name(0, 0)} is ERROR on {A}"
    assert found.fix.startswith(f"the healer resets {name(0, 0)} on its next run")
    assert found.actions == (Action.RESET_SEGMENT, Action.RUN_HEALER)
    assert found.next_step == "the healer acts within seconds, or Run healer now, or Reset segment"
    off = diagnose(view(broken, consuming()), timing(error_auto_reset=False))
    assert "automatic reset is off" in off.fix and off.due_ms is None


def test_one_error_replica_of_a_consuming_segment_is_left_to_the_operator():
    reason = "permanent: bad message at offset 151"
    found = diagnose(
        view(
            consuming(ideal={A: "OFFLINE", B: "CONSUMING"}, external={A: "ERROR", B: "CONSUMING"}),
            replicas={A: "ERROR", B: "CONSUMING"},
            reports=[report(A, "ERROR", stopped_reason=reason), report(B)],
            verdict="CONSUMER_ERROR",
        ),
        timing(),
    )
    assert found.kind == "partialError"
    assert found.headline == (
        f"{A} stopped consuming {name(0, 1)} ({A}: {reason}); the other replicas go on"
    )
    assert found.actions == (Action.RESET_SEGMENT,) and found.due_ms is None


def test_every_replica_in_error_on_a_committing_segment_needs_reingestion():
    stuck = segment(
        0, 1, "COMMITTING", {A: "ONLINE", B: "ONLINE"}, external={A: "ERROR", B: "ERROR"}
    )
    found = diagnose(view(stuck, consuming(0, 2)), timing())
    assert found.kind == "reingest" and "re-ingestion" in found.fix


# --- paused, stream, servers --------------------------------------------------------------------


def test_a_paused_table_says_resume_and_still_resets_errors():
    gone = segment(0, 1, "DONE")  # no CONSUMING segment: a resume makes one
    found = diagnose(
        view(gone, table_paused=True, pause_text="by alice: maintenance", verdict="PAUSED"),
        timing(),
    )
    assert found.kind == "paused"
    assert found.headline == "consumption of the table is paused (by alice: maintenance)"
    assert found.actions == (Action.RESUME,) and found.due_ms is None
    broken = segment(0, 0, "DONE", external={A: "ERROR", B: "ONLINE"})
    with_error = diagnose(view(broken, gone, table_paused=True), timing())
    assert "the healer resets" in with_error.fix and with_error.due_ms == NOW


def test_a_paused_partition_is_left_alone():
    found = diagnose(view(segment(0, 1, "DONE"), partition_paused=True), timing())
    assert found.headline == "consumption of partition 0 is paused"


def test_offsets_dropped_by_the_stream_point_at_the_stream():
    found = diagnose(
        view(
            consuming(),
            reports=[report(A, lost_offsets=40), report(B)],
            verdict="OFFSET_UNAVAILABLE",
        ),
        timing(),
    )
    assert found.kind == "dataLost"
    assert found.headline.startswith(f"the stream dropped 40 offset(s) before {A} could read them")
    assert found.actions == (Action.CHECK_STREAM,)
    assert f"{A}: CONSUMING (CONSUMING) at offset 150 of 160; 40 offset(s) lost upstream" in (
        texts(found)
    )


def test_a_segment_that_skipped_lost_offsets_says_so():
    skipped = consuming(
        custom=custom_map(
            '{"consumption.previousOffset":"90","consumption.startReason":"dataLoss"}'
        )
    )
    found = diagnose(view(skipped, reports=[report(A), report(B)]), timing())
    assert f"{name(0, 1)}: starts at 100, not 90 (dataLoss)" in texts(found, Source.METADATA)


def test_replicas_not_reporting_name_the_servers_that_are_down():
    found = diagnose(
        view(consuming(), verdict="NOT_REPORTING", live_servers=frozenset({B})), timing()
    )
    assert found.kind == "notReporting"
    assert found.headline == f"no replica reports on {name(0, 1)}: {A} not live in ZooKeeper"
    assert f"{A}: not live in ZooKeeper" in texts(found, Source.SERVER)
    assert found.actions == (Action.CHECK_SERVERS,) and found.next_step == "Check the servers"


def test_a_stream_that_cannot_be_read_is_named():
    found = diagnose(
        view(
            consuming(),
            stream_error="topic 'events' does not exist",
            reports=[report(A, "ERROR", stopped_reason="topicNotFound")],
            verdict="CONSUMER_ERROR",
            replicas={A: "CONSUMING", B: "CONSUMING"},
        ),
        timing(),
    )
    assert found.headline == "the stream cannot be read: topic 'events' does not exist"
    assert found.actions == (Action.CHECK_STREAM,)


def test_a_stalled_partition_is_for_the_servers():
    found = diagnose(
        view(consuming(), verdict="STALLED", verdict_detail="stalled for 90 s, 10 records behind"),
        timing(),
    )
    assert not found.healthy
    assert found.headline == "stalled: stalled for 90 s, 10 records behind"


# --- the outlook the mirror uses to request runs ----------------------------------------------


def test_the_outlook_lists_what_a_run_would_repair_now():
    segments = [
        segment(0, 1, "DONE", {A: "CONSUMING"}, mtime=NOW - GUARD - 1),  # due
        segment(1, 1, "DONE", {A: "CONSUMING"}, mtime=NOW - 1000),  # guarded
        segment(2, 0, "DONE", external={A: "ERROR", B: "ONLINE"}),  # error
        consuming(2, 1),
    ]
    found = outlook(segments, now_ms=NOW, max_completion_ms=GUARD, stream_partitions=3)
    due = found.due()
    assert len(due) == 2 and "commit step 1" in due[0] and "is ERROR on" in due[1]
    assert [w.partition for w in found.plan.waits] == [1]
    paused = outlook(segments, now_ms=NOW, max_completion_ms=GUARD, paused=True)
    assert len(paused.due()) == 1 and "ERROR" in paused.due()[0]
    no_reset = outlook(segments, now_ms=NOW, max_completion_ms=GUARD, error_auto_reset=False)
    assert len(no_reset.due()) == 1


def test_clock_writes_the_date_only_for_another_day():
    assert clock(NOW - 1000, NOW) == "12:09:59 UTC"
    assert clock(NOW - 86_400_000, NOW) == "2026-11-24 12:10:00 UTC"
