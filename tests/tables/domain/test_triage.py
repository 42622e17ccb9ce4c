"""Partition verdicts, their precedence, and the table roll-up (tables.domain.triage)."""

from __future__ import annotations

import pytest

from tables.domain.triage import (
    HEALTH_RANK,
    Health,
    PartitionFacts,
    PartitionVerdict,
    PauseInfo,
    ReplicaLive,
    Thresholds,
    Verdict,
    is_all_offline,
    percent_available,
    progressed_at,
    segment_display_state,
    table_health,
    triage_partition,
    worst,
)

NOW = 1_714_563_100_000
SEG = "t__0__5__20240501T1131Z"
T = Thresholds(stalled_after_s=60, lagging_records=1000, lagging_time_ms=30_000, idle_after_s=60)


def live(**kwargs) -> ReplicaLive:
    base = {
        "current_offset": 500,
        "upstream_offset": 500,
        "records_lag": 0,
        "availability_lag_ms": 0,
        "last_consumed_ms": NOW - 1000,
        "rows_per_s": 12.5,
        "updated_ms": NOW - 500,
    }
    return ReplicaLive(**{**base, **kwargs})


def facts(**kwargs) -> PartitionFacts:
    base = {
        "partition": 0,
        "consuming_segment": SEG,
        "latest_segment": SEG,
        "ev_states": {"S1": "CONSUMING", "S2": "CONSUMING"},
        "live": {"S1": live(), "S2": live(current_offset=490)},
        "progressed_at_ms": NOW - 1000,
    }
    return PartitionFacts(**{**base, **kwargs})


def judge(**kwargs) -> PartitionVerdict:
    return triage_partition(facts(**kwargs), NOW, T)


def test_health_values_and_order_are_those_of_the_models():
    from tables.models import HEALTH_RANK as MODEL_RANK
    from tables.models import Health as ModelHealth

    assert [h.value for h in Health] == list(ModelHealth.values)
    assert HEALTH_RANK == MODEL_RANK
    assert worst(["GOOD", "BAD", "PAUSED"]) == Health.BAD
    assert worst([]) == Health.GOOD


def test_a_healthy_partition_is_consuming_with_the_best_replica_figures():
    replicas = {"S1": live(records_lag=3, rows_per_s=9.0), "S2": live(current_offset=490)}
    result = judge(live=replicas, progressed_at_ms=NOW)
    assert (result.verdict, result.health) == (Verdict.CONSUMING, Health.GOOD)
    assert result.current_offset == 500
    assert result.records_lag == 3
    assert result.rows_per_s == 12.5
    assert result.stalled_s == 0


def test_lagging_by_records_or_by_time_is_a_warning():
    by_records = judge(live={"S1": live(records_lag=5000)})
    by_time = judge(live={"S1": live(records_lag=10, availability_lag_ms=45_000)})
    assert (by_records.verdict, by_records.health) == (Verdict.LAGGING, Health.WARNING)
    assert "5000 records" in by_records.detail
    assert by_time.verdict == Verdict.LAGGING
    assert by_time.time_lag_ms == 45_000


def test_lag_without_progress_for_the_stall_time_is_stalled():
    result = judge(live={"S1": live(records_lag=20)}, progressed_at_ms=NOW - 90_000)
    assert (result.verdict, result.health) == (Verdict.STALLED, Health.BAD)
    assert result.detail.startswith("stalled for 90 s")
    assert result.stalled_s == 90
    not_yet = judge(live={"S1": live(records_lag=20)}, progressed_at_ms=NOW - 59_000)
    assert not_yet.verdict == Verdict.CONSUMING
    assert not_yet.stalled_s == 59


def test_no_lag_and_no_new_rows_for_a_while_is_no_upstream_data():
    idle = live(records_lag=0, last_consumed_ms=NOW - 120_000, rows_per_s=0.0)
    result = judge(live={"S1": idle}, progressed_at_ms=NOW - 120_000)
    assert (result.verdict, result.health) == (Verdict.NO_UPSTREAM_DATA, Health.GOOD)
    assert result.detail == "no new rows for 120 s"
    assert result.stalled_s == 0  # no lag: nothing is stuck


def test_paused_table_and_paused_partition():
    pause = PauseInfo(
        paused=True, reason_code="ADMINISTRATIVE", comment="alice", time="2024-05-01 11:00:02.0"
    )
    result = judge(pause=pause)
    assert (result.verdict, result.health) == (Verdict.PAUSED, Health.PAUSED)
    assert result.detail == "paused by alice since 2024-05-01 11:00:02.0, reason ADMINISTRATIVE"
    partition = judge(partition_paused=True, consuming_segment="")
    assert partition.verdict == Verdict.PAUSED
    assert "pausedPartitions" in partition.detail


def test_no_consuming_segment_is_missing_consuming_segment():
    result = judge(consuming_segment="", live={}, latest_segment="t__0__4__20240501T1031Z")
    assert (result.verdict, result.health) == (Verdict.MISSING_CONSUMING_SEGMENT, Health.BAD)
    assert "t__0__4__20240501T1031Z" in result.detail


def test_error_in_the_external_view_or_a_not_consuming_replica_is_a_consumer_error():
    in_ev = judge(ev_states={"S1": "ERROR", "S2": "CONSUMING"})
    assert (in_ev.verdict, in_ev.health) == (Verdict.CONSUMER_ERROR, Health.BAD)
    assert "S1 is ERROR in the ExternalView" in in_ev.detail
    stopped = judge(live={"S1": live(consumer_state="NOT_CONSUMING", phase="ERROR")})
    assert stopped.verdict == Verdict.CONSUMER_ERROR
    # NOT_CONSUMING while completing the segment is the protocol, not an error.
    holding = judge(live={"S1": live(consumer_state="NOT_CONSUMING", phase="HOLDING")})
    assert holding.verdict == Verdict.COMMITTING


def test_lost_offsets_are_offset_unavailable():
    result = judge(live={"S1": live(lost_offsets=42)})
    assert (result.verdict, result.health) == (Verdict.OFFSET_UNAVAILABLE, Health.BAD)
    assert "42 offsets" in result.detail
    assert result.lost_offsets == 42


def test_a_consuming_segment_nobody_reports_on_is_not_reporting():
    result = judge(live={})
    assert (result.verdict, result.health) == (Verdict.NOT_REPORTING, Health.WARNING)
    assert "S1, S2" in result.detail
    assert result.current_offset is None


def test_a_new_segment_nobody_reports_on_yet_is_starting_until_the_grace_runs_out():
    grace_ms = int(T.report_grace_s * 1000)
    result = judge(live={}, consuming_created_ms=NOW - 4_000)
    assert (result.verdict, result.health) == (Verdict.STARTING, Health.UPDATING)
    assert result.detail == f"{SEG} created 4 s ago; its replicas have not reported yet"
    assert judge(live={}, consuming_created_ms=NOW - grace_ms + 1).verdict == Verdict.STARTING
    assert judge(live={}, consuming_created_ms=NOW - grace_ms).verdict == Verdict.NOT_REPORTING
    assert judge(live={}, consuming_created_ms=None).verdict == Verdict.NOT_REPORTING
    # Reports win over the grace: a replica that publishes is judged on what it says.
    assert judge(consuming_created_ms=NOW - 1_000).verdict == Verdict.CONSUMING
    # Errors still come first.
    error = judge(live={}, ev_states={"S1": "ERROR"}, consuming_created_ms=NOW - 1_000)
    assert error.verdict == Verdict.CONSUMER_ERROR


@pytest.mark.parametrize("phase", ["HOLDING", "CATCHING_UP", "COMMITTING"])
def test_a_replica_completing_the_segment_is_committing(phase):
    result = judge(
        live={"S1": live(phase=phase, records_lag=50_000)}, progressed_at_ms=NOW - 300_000
    )
    assert (result.verdict, result.health) == (Verdict.COMMITTING, Health.GOOD)
    assert phase in result.detail


def test_precedence_is_the_documented_order():
    # Everything wrong at once: each rule removed in turn reveals the next one.
    pause = PauseInfo(paused=True, comment="ops")
    bad_live = {"S1": live(consumer_state="NOT_CONSUMING", phase="ERROR", lost_offsets=5)}
    holding = {"S1": live(phase="HOLDING", records_lag=99_999)}
    behind = {"S1": live(records_lag=99_999)}
    steps = [
        ({"pause": pause, "consuming_segment": ""}, Verdict.PAUSED),
        ({"consuming_segment": ""}, Verdict.MISSING_CONSUMING_SEGMENT),
        ({"live": bad_live}, Verdict.CONSUMER_ERROR),
        ({"live": {"S1": live(lost_offsets=5, phase="COMMITTING")}}, Verdict.OFFSET_UNAVAILABLE),
        ({"live": {}, "consuming_created_ms": NOW}, Verdict.STARTING),
        ({"live": {}}, Verdict.NOT_REPORTING),
        ({"live": holding, "progressed_at_ms": NOW - 600_000}, Verdict.COMMITTING),
        ({"live": behind, "progressed_at_ms": NOW - 600_000}, Verdict.STALLED),
        ({"live": behind}, Verdict.LAGGING),
    ]  # fmt: skip
    for overrides, expected in steps:
        assert judge(**overrides).verdict == expected, overrides


def test_progressed_at_moves_with_the_offset_or_the_segment():
    assert progressed_at(None, None, "", 10, SEG, NOW) == NOW
    assert progressed_at(NOW - 5000, 10, SEG, 10, SEG, NOW) == NOW - 5000
    assert progressed_at(NOW - 5000, 10, SEG, 11, SEG, NOW) == NOW
    assert progressed_at(NOW - 5000, 10, SEG, None, SEG, NOW) == NOW - 5000
    assert progressed_at(NOW - 5000, 10, SEG, 10, "t__0__6__20240501T1231Z", NOW) == NOW


def test_segment_display_state():
    online = {"S1": "ONLINE", "S2": "ONLINE"}
    assert segment_display_state(online, online) == "ONLINE"
    consuming = {"S1": "CONSUMING"}
    assert segment_display_state(consuming, consuming) == "CONSUMING"
    assert segment_display_state(online, {"S1": "ONLINE", "S2": "ERROR"}) == "ERROR"
    assert segment_display_state(online, {"S1": "ONLINE"}) == "UPDATING"
    offline = {"S1": "OFFLINE"}
    assert segment_display_state(offline, offline) == "OFFLINE"
    assert is_all_offline(offline, {})
    assert is_all_offline(online, {"S1": "OFFLINE", "S2": "OFFLINE"})
    assert not is_all_offline(online, {"S1": "OFFLINE", "S2": "ONLINE"})


def test_percent_available_follows_pinot():
    online = {"S1": "ONLINE"}
    segments = [
        (online, online, None),
        (online, {"S1": "ERROR"}, NOW - 3_600_000),
        ({"S1": "CONSUMING"}, {"S1": "CONSUMING"}, NOW),
        ({"S1": "OFFLINE"}, {}, None),  # OFFLINE in the IdealState: left out
        ({"S1": "CONSUMING"}, {}, NOW - 5_000),  # new, not yet in the ExternalView: left out
    ]
    assert percent_available(segments, NOW) == 66
    assert percent_available([({"S1": "CONSUMING"}, {}, NOW - 900_000)], NOW) == 0
    assert percent_available([], NOW) == 100


def test_table_health_takes_the_worst_finding():
    good = judge()
    lagging = judge(live={"S1": live(records_lag=5000)})
    assert table_health([(0, good), (1, good)]) == (Health.GOOD, "")
    health, reason = table_health([(0, good), (3, lagging)])
    assert health == Health.WARNING
    assert reason.startswith("partition 3: LAGGING")
    assert table_health([(0, good)], updating=True)[0] == Health.UPDATING
    assert table_health([(0, lagging)], updating=True)[0] == Health.WARNING
    paused = judge(pause=PauseInfo(paused=True))
    assert table_health([(0, paused)], paused=True)[0] == Health.PAUSED
    assert table_health([(0, good)], error_segments=2) == (
        Health.BAD,
        "2 segment(s) in ERROR or all OFFLINE",
    )
    assert table_health([], percent=50)[0] == Health.BAD
