"""Honest verdicts (pure): commit durations from published since-times, overdue commits,
under-replication, unknown lags, tables that never commit, ingestion down."""

from __future__ import annotations

from tables.domain import table_checks, triage
from tables.domain.triage import Health, PartitionFacts, ReplicaLive, Thresholds, Verdict

T0 = 1_700_000_000_000
MIN = 60_000


def _commit_facts(**live: ReplicaLive) -> PartitionFacts:
    return PartitionFacts(
        partition=0,
        consuming_segment="t__0__1__20231114T2213Z",
        ev_states=dict.fromkeys(live, "CONSUMING"),
        live=live,
        replication=len(live),
        progressed_at_ms=T0,
    )


def _phase(phase: str, since_ms: int, completing_ms: int | None = None) -> ReplicaLive:
    return ReplicaLive(phase=phase, phase_since_ms=since_ms, completing_since_ms=completing_ms)


def test_a_commit_duration_counts_from_the_phase_start_not_the_last_offset_move():
    facts = _commit_facts(s1=_phase("CATCHING_UP", T0, T0 - 30_000))
    # The offset moved just now (progressed_at = now): the duration still counts from T0.
    moved = PartitionFacts(**{**facts.__dict__, "progressed_at_ms": T0 + 90_000})
    first = triage.triage_partition(moved, T0 + 90_000)
    later = triage.triage_partition(moved, T0 + 150_000)
    assert first.verdict is Verdict.COMMITTING and first.health is Health.GOOD
    assert first.detail == "commit for 2 min 00 s: s1 CATCHING_UP for 1 min 30 s"
    assert later.detail == "commit for 3 min 00 s: s1 CATCHING_UP for 2 min 30 s"


def test_a_commit_past_the_limit_warns_then_turns_critical_past_twice_the_limit():
    facts = _commit_facts(s1=_phase("HOLDING", T0, T0), s2=_phase("COMMITTING", T0 + MIN, T0))
    limits = Thresholds(commit_limit_ms=5 * MIN)
    within = triage.triage_partition(facts, T0 + 5 * MIN, limits)
    past = triage.triage_partition(facts, T0 + 5 * MIN + 1000, limits)
    stuck = triage.triage_partition(facts, T0 + 10 * MIN + 1000, limits)
    assert (within.verdict, within.health) == (Verdict.COMMITTING, Health.GOOD)
    assert (past.verdict, past.health) == (Verdict.COMMIT_OVERDUE, Health.WARNING)
    assert past.detail.startswith("commit for 5 min 01 s: s1 HOLDING for 5 min 01 s, ")
    assert past.detail.endswith(
        "; past the 5 min 00 s completion time limit (MAX_SEGMENT_COMPLETION_TIME)"
    )
    assert (stuck.verdict, stuck.health) == (Verdict.COMMIT_OVERDUE, Health.BAD)
    assert "past twice the 5 min 00 s completion time limit" in stuck.detail
    # Without since-times (an older server) a commit is never called overdue.
    blind = _commit_facts(s1=ReplicaLive(phase="HOLDING"))
    assert triage.triage_partition(blind, T0 + 60 * MIN, limits).verdict is Verdict.COMMITTING


def test_commit_detail_is_recomputed_for_any_now_and_never_contains_the_note_separator():
    live = {"s1": _phase("HOLDING", T0, T0)}
    assert triage.commit_detail(live, T0 + 42_000) == "commit for 42 s: s1 HOLDING for 42 s"
    assert "; " not in triage.commit_detail(live, T0 + 10 * MIN)
    assert triage.commit_started_ms({"s1": _phase("HOLDING", T0 + 5, None)}) == T0 + 5


def test_fewer_replicas_up_than_the_replication_is_under_replicated_after_the_grace():
    live = {"s1": ReplicaLive(current_offset=5, upstream_offset=5)}
    facts = PartitionFacts(
        partition=3,
        consuming_segment="t__3__1__20231114T2213Z",
        ev_states={"s1": "CONSUMING", "s2": "OFFLINE"},
        live=live,
        replication=2,
        progressed_at_ms=T0,
        consuming_created_ms=T0,
    )
    young = triage.triage_partition(facts, T0 + 5_000)
    old = triage.triage_partition(facts, T0 + 60_000)
    assert young.verdict is Verdict.CONSUMING
    assert (old.verdict, old.health) == (Verdict.UNDER_REPLICATED, Health.WARNING)
    assert old.detail == "1 of 2 replicas CONSUMING or ONLINE in the ExternalView"
    full = PartitionFacts(**{**facts.__dict__, "ev_states": {"s1": "CONSUMING", "s2": "ONLINE"}})
    assert triage.triage_partition(full, T0 + 60_000).verdict is Verdict.NO_UPSTREAM_DATA
    assert triage.replicas_up({"a": "CONSUMING", "b": "ONLINE", "c": "ERROR", "d": ""}) == 2


def test_a_lag_is_known_only_with_an_upstream_offset():
    assert triage.lag_known(0) and triage.lag_known(12)
    assert not triage.lag_known(None)


def test_replica_live_reads_the_published_json_with_or_without_since_times():
    old = ReplicaLive.from_published({"phase": "HOLDING", "recordsLag": 4, "updatedMs": 7})
    assert (old.phase, old.records_lag, old.phase_since_ms, old.completing_since_ms) == (
        "HOLDING",
        4,
        None,
        None,
    )
    new = ReplicaLive.from_published({"phaseSinceMs": 5, "completingSinceMs": 3})
    assert (new.phase_since_ms, new.completing_since_ms) == (5, 3)


def test_a_table_that_never_commits_is_flagged_after_twice_its_flush_time():
    hour = 60 * MIN
    kwargs = {"first_created_ms": T0, "committed": False, "flush_ms": hour, "rows_arriving": True}
    assert table_checks.never_committed(**kwargs, now_ms=T0 + 2 * hour - 1) == ""
    reason = table_checks.never_committed(**kwargs, now_ms=T0 + 2 * hour)
    assert reason == "no segment committed in 2 h 00 min while rows arrive (flush time 1 h 00 min)"
    assert table_checks.never_committed(**{**kwargs, "committed": True}, now_ms=T0 + 9 * hour) == ""
    idle = {**kwargs, "rows_arriving": False}
    assert table_checks.never_committed(**idle, now_ms=T0 + 9 * hour) == ""
    health, why = triage.table_health([], never_committed=reason)
    assert (health, why) == (Health.WARNING, reason)


def test_ingestion_is_down_when_rows_wait_and_nothing_moves_for_twice_the_flush_time():
    flush = 10 * MIN
    base = {"rows_waiting": True, "flush_ms": flush, "now_ms": T0 + 30 * MIN}
    fine = table_checks.ingestion_problem(
        **base, last_progress_ms=T0 + 29 * MIN, last_commit_ms=T0 + 25 * MIN
    )
    assert fine == ""
    stalled = table_checks.ingestion_problem(
        **base, last_progress_ms=T0, last_commit_ms=T0 + 25 * MIN
    )
    assert (
        stalled
        == "rows wait upstream but nothing consumed for 30 min 00 s (flush time 10 min 00 s)"
    )
    uncommitted = table_checks.ingestion_problem(
        **base, last_progress_ms=T0 + 29 * MIN, last_commit_ms=T0
    )
    assert "nothing committed for 30 min 00 s" in uncommitted
    nothing_waits = {**base, "rows_waiting": False}
    assert (
        table_checks.ingestion_problem(**nothing_waits, last_progress_ms=T0, last_commit_ms=T0)
        == ""
    )


def test_flush_time_falls_back_to_pinots_default():
    assert table_checks.flush_time_ms("10m") == 10 * MIN
    assert table_checks.flush_time_ms("") == table_checks.flush_time_ms("bogus") == 6 * 60 * MIN
