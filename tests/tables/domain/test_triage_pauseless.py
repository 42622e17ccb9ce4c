"""Partition verdicts during a pauseless commit (tables.domain.triage, `committing_segment`).

Between commit start and commit end the committed segment is COMMITTING in ZooKeeper, its
replicas are already ONLINE in the IdealState and the next segment consumes: that is a commit in
progress, not a stall, a missing report or a consumer error.
"""

from __future__ import annotations

from tables.domain.triage import (
    Health,
    PartitionFacts,
    PauseInfo,
    ReplicaLive,
    Thresholds,
    Verdict,
    triage_partition,
)

NOW = 1_714_563_100_000
DONE_SEG = "t__0__4__20240501T1125Z"
NEXT_SEG = "t__0__5__20240501T1131Z"
LIMIT_MS = 300_000
T = Thresholds(stalled_after_s=60, idle_after_s=60, report_grace_s=30, commit_limit_ms=LIMIT_MS)


def live(**kwargs) -> ReplicaLive:
    base = {
        "current_offset": 500,
        "upstream_offset": 520,
        "records_lag": 20,
        "last_consumed_ms": NOW - 1000,
        "rows_per_s": 12.5,
        "updated_ms": NOW - 500,
    }
    return ReplicaLive(**{**base, **kwargs})


def pauseless(**kwargs) -> PartitionFacts:
    """Segment 4 COMMITTING since 40 s (its replicas ONLINE), segment 5 consuming."""
    base = {
        "partition": 0,
        "consuming_segment": NEXT_SEG,
        "latest_segment": NEXT_SEG,
        "ev_states": {"S1": "CONSUMING", "S2": "CONSUMING"},
        "live": {"S1": live(), "S2": live()},
        "progressed_at_ms": NOW - 1000,
        "committing_segment": DONE_SEG,
        "committing_since_ms": NOW - 40_000,
        "committing_states": {"S1": "ONLINE", "S2": "ONLINE"},
    }
    return PartitionFacts(**{**base, **kwargs})


def judge(**kwargs):
    return triage_partition(pauseless(**kwargs), NOW, T)


def test_a_background_commit_with_the_next_segment_consuming_is_healthy_committing():
    result = judge()
    assert (result.verdict, result.health) == (Verdict.COMMITTING, Health.GOOD)
    assert result.detail.startswith(f"{DONE_SEG} COMMITTING for 40 s (pauseless")
    assert f"{NEXT_SEG} consuming, 12.5 rows/s, 20 records behind" in result.detail
    assert result.records_lag == 20  # the next segment's figures stay the partition's


def test_without_the_committing_fact_the_same_partition_reads_stalled():
    """The control: offsets still for 5 minutes with lag is a stall, unless a commit runs."""
    stuck = {"progressed_at_ms": NOW - LIMIT_MS}
    assert judge(**stuck, committing_segment="").verdict == Verdict.STALLED
    assert judge(**stuck).verdict == Verdict.COMMITTING


def test_the_next_segment_not_reporting_yet_is_still_committing_not_not_reporting():
    assert judge(live={}, committing_segment="").verdict == Verdict.NOT_REPORTING
    result = judge(live={})
    assert (result.verdict, result.health) == (Verdict.COMMITTING, Health.GOOD)
    assert result.detail.endswith(f"{NEXT_SEG} starting")


def test_consumers_stopped_at_the_end_of_the_committing_segment_are_no_consumer_error():
    """The controller stopped after commit start: the IdealState still has segment 4 CONSUMING,
    its consumers stopped at its end offset and say NOT_CONSUMING."""
    stopped = live(consumer_state="NOT_CONSUMING", phase="STOPPED", records_lag=0)
    state = {"consuming_segment": DONE_SEG, "latest_segment": DONE_SEG, "live": {"S1": stopped}}
    assert judge(**state, committing_segment="").verdict == Verdict.CONSUMER_ERROR
    result = judge(**state)
    assert result.verdict == Verdict.COMMITTING
    assert result.detail.endswith("no next segment consuming yet")


def test_an_error_replica_of_the_consuming_segment_is_still_a_consumer_error():
    result = judge(ev_states={"S1": "ERROR", "S2": "CONSUMING"})
    assert (result.verdict, result.health) == (Verdict.CONSUMER_ERROR, Health.BAD)


def test_past_the_completion_time_limit_the_commit_is_overdue_then_bad():
    overdue = judge(committing_since_ms=NOW - LIMIT_MS - 1000)
    assert (overdue.verdict, overdue.health) == (Verdict.COMMIT_OVERDUE, Health.WARNING)
    assert overdue.detail.endswith(
        "past the 5 min 00 s completion time limit: the healer repairs it"
    )
    late = judge(committing_since_ms=NOW - 2 * LIMIT_MS - 1000)
    assert (late.verdict, late.health) == (Verdict.COMMIT_OVERDUE, Health.BAD)


def test_every_replica_of_the_committing_segment_in_error_is_bad_at_once():
    result = judge(committing_states={"S1": "ERROR", "S2": "ERROR"})
    assert (result.verdict, result.health) == (Verdict.COMMIT_OVERDUE, Health.BAD)
    assert "needs re-ingestion from the stream" in result.detail
    some = judge(committing_states={"S1": "ERROR", "S2": "ONLINE"})
    assert some.verdict == Verdict.COMMITTING


def test_a_paused_table_and_lost_offsets_still_take_precedence():
    assert judge(pause=PauseInfo(paused=True)).verdict == Verdict.PAUSED
    assert judge(live={"S1": live(lost_offsets=3)}).verdict == Verdict.OFFSET_UNAVAILABLE
