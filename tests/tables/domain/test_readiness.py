"""Pinot's server startup status (ServiceStatus callbacks behind GET /health/readiness), pure."""

from __future__ import annotations

from tables.domain.readiness import (
    Consumption,
    Snapshot,
    StartupStatus,
    assigned_states,
    state_mismatch,
)

ME, OTHER = "Server_a_1", "Server_b_2"
T, U = "t_REALTIME", "u_REALTIME"
S0, S1, S2 = "t__0__0__20240101T0000Z", "t__1__0__20240101T0000Z", "t__2__3__20240101T0000Z"
NOW = 1_800_000_000_000
WAIT = 60_000


def status(
    ideal: dict | None = None,
    wait_ms: int = WAIT,
    offset_checker: bool = True,
) -> StartupStatus:
    """A startup status for ME; default: T with S0, S1 CONSUMING here, S2 ONLINE elsewhere."""
    if ideal is None:
        ideal = {
            T: {
                S0: {ME: "CONSUMING", OTHER: "CONSUMING"},
                S1: {ME: "CONSUMING"},
                S2: {OTHER: "ONLINE"},
            }
        }
    return StartupStatus.at_startup(ideal, ME, NOW, wait_ms, offset_checker)


def snap(
    ideal: dict | None = None,
    current: dict | None = None,
    external: dict | None = None,
    consumption: dict | None = None,
) -> Snapshot:
    """Default: T's assignment to ME matched everywhere, nothing consumed yet."""
    assigned = {S0: "CONSUMING", S1: "CONSUMING"}
    ideal = {T: assigned} if ideal is None else ideal
    current = {T: dict(assigned)} if current is None else current
    external = {T: dict(assigned)} if external is None else external
    return Snapshot(ideal, current, external, consumption or {})


def caught_up() -> dict:
    return {(T, S0): Consumption(True, 100, 100), (T, S1): Consumption(True, 7, 5)}


# --- helpers ------------------------------------------------------------------------------------
def test_assigned_states_keeps_only_segments_naming_the_instance() -> None:
    fields = {S0: {ME: "ONLINE", OTHER: "ONLINE"}, S1: {OTHER: "CONSUMING"}, S2: {ME: "OFFLINE"}}
    assert assigned_states(fields, ME) == {S0: "ONLINE", S2: "OFFLINE"}
    assert assigned_states(fields, "Server_c_3") == {}


def test_state_mismatch_rules() -> None:
    assert state_mismatch({S0: "ONLINE", S1: "CONSUMING"}, {S0: "ONLINE", S1: "CONSUMING"}) is None
    assert state_mismatch({S0: "ONLINE"}, {S0: "ERROR"}) is None  # ERROR: it was tried
    assert state_mismatch({S0: "OFFLINE"}, {}) is None  # OFFLINE-assigned: ignored
    assert state_mismatch({S0: "OFFLINE"}, {S0: "ONLINE"}) is None
    assert state_mismatch({S0: "ONLINE"}, {}) == f"partition={S0}, expected=ONLINE, found=None"
    assert (
        state_mismatch({S0: "ONLINE"}, {S0: "CONSUMING"})
        == f"partition={S0}, expected=ONLINE, found=CONSUMING"
    )


def test_state_mismatch_reports_the_first_segment_in_name_order() -> None:
    found = state_mismatch({S2: "ONLINE", S1: "CONSUMING", S0: "ONLINE"}, {S0: "ONLINE"})
    assert found == f"partition={S1}, expected=CONSUMING, found=None"


# --- at_startup -----------------------------------------------------------------------------------
def test_at_startup_fixes_resources_and_consuming_segments() -> None:
    ideal = {
        T: {S0: {ME: "CONSUMING"}, S1: {ME: "ONLINE"}, S2: {ME: "OFFLINE"}},
        U: {"u__0__0__20240101T0000Z": {OTHER: "CONSUMING"}},  # does not name ME
    }
    s = StartupStatus.at_startup(ideal, ME, NOW, WAIT)
    assert s.resources == {T}
    assert s.consuming == {(T, S0)}
    assert s.catchup_end_ms == NOW + WAIT
    assert s.offset_checker is True
    assert s.good is False
    assert s.last_reason == "Init"
    assert list(s.pending()) == [T]


def test_at_startup_with_wait_zero_monitors_no_consuming_segment() -> None:
    s = status(wait_ms=0)
    assert s.resources == {T}
    assert s.consuming == set()


def test_at_startup_with_only_offline_assignment_still_monitors_the_table() -> None:
    s = status({T: {S0: {ME: "OFFLINE"}}})
    assert s.resources == {T}
    assert s.consuming == set()
    assert s.evaluate(snap(ideal={T: {S0: "OFFLINE"}}, current={}, external={}), NOW) is None


# --- IdealState match ----------------------------------------------------------------------------
def test_good_when_all_states_match_and_consumption_caught_up() -> None:
    s = status()
    assert s.evaluate(snap(consumption=caught_up()), NOW + 1) is None
    assert s.good is True
    assert s.last_reason is None
    assert list(s.pending()) == []


def test_missing_current_state_is_starting_with_pinots_reason() -> None:
    s = status()
    reason = s.evaluate(snap(current={T: {S0: "CONSUMING"}}, consumption=caught_up()), NOW)
    assert reason == (
        f"partition={S1}, expected=CONSUMING, found=None, "
        f"waitingFor=CurrentStateMatch, resource={T}"
    )
    assert s.good is False
    assert s.last_reason == reason
    assert s.resources == {T}


def test_current_state_matched_but_external_view_not_is_starting() -> None:
    s = status()
    view = {T: {S0: "CONSUMING", S1: "OFFLINE"}}
    reason = s.evaluate(snap(external=view, consumption=caught_up()), NOW)
    assert reason == (
        f"partition={S1}, expected=CONSUMING, found=OFFLINE, waitingFor=ExternalViewMatch, "
        f"resource={T}"
    )


def test_table_missing_from_current_states_and_view_is_starting() -> None:
    s = status()
    reason = s.evaluate(snap(current={}, external={}), NOW)
    assert reason == (
        f"partition={S0}, expected=CONSUMING, found=None, "
        f"waitingFor=CurrentStateMatch, resource={T}"
    )


def test_error_counts_as_matched() -> None:
    s = status()
    errored = {T: {S0: "ERROR", S1: "ERROR"}}
    assert s.evaluate(snap(current=errored, external=errored, consumption=caught_up()), NOW) is None


def test_offline_assigned_segment_is_ignored() -> None:
    s = status({T: {S0: {ME: "ONLINE"}, S1: {ME: "OFFLINE"}}})
    matched = {T: {S0: "ONLINE"}}
    found = snap(ideal={T: {S0: "ONLINE", S1: "OFFLINE"}}, current=matched, external=matched)
    assert s.evaluate(found, NOW) is None


def test_current_ideal_state_is_what_is_matched() -> None:
    """The assignment is re-read each round: a segment moved away is no longer waited for."""
    s = status({T: {S0: {ME: "ONLINE"}, S1: {ME: "ONLINE"}}})
    matched = {T: {S0: "ONLINE"}}
    assert (
        s.evaluate(snap(ideal={T: {S0: "ONLINE"}}, current=matched, external=matched), NOW) is None
    )


def test_removed_table_counts_as_matched() -> None:
    s = status(wait_ms=0)
    assert s.evaluate(snap(ideal={T: None}, current={}, external={}), NOW) is None
    assert s.resources == set()


def test_table_not_read_yet_is_starting() -> None:
    s = status(wait_ms=0)
    assert s.evaluate(snap(ideal={}), NOW) == f"IdealState of {T} not read yet"
    assert s.good is False
    assert s.resources == {T}


def test_matched_table_is_not_checked_again() -> None:
    ideal = {T: {S0: {ME: "ONLINE"}}, U: {"u0": {ME: "ONLINE"}}}
    s = status(ideal, wait_ms=0)
    both = {T: {S0: "ONLINE"}, U: {"u0": "ONLINE"}}
    first = s.evaluate(snap(ideal=both, current={T: {S0: "ONLINE"}}, external=both), NOW)
    assert first == (
        f"partition=u0, expected=ONLINE, found=None, waitingFor=CurrentStateMatch, resource={U}"
    )
    assert s.resources == {U}
    assert list(s.pending()) == [U]
    # T now mismatches, but it matched once: only U is looked at (and T is absent from the read).
    second = snap(ideal={U: {"u0": "ONLINE"}}, current={U: {"u0": "ONLINE"}}, external=both)
    assert s.evaluate(second, NOW + 1) is None


# --- consumption catch-up ------------------------------------------------------------------------
def test_starting_until_target_offset_is_reached() -> None:
    s = status()
    behind = {(T, S0): Consumption(True, 99, 100), (T, S1): Consumption(True, 5, 5)}
    reason = s.evaluate(snap(consumption=behind), NOW + 1_000)
    assert reason == (
        f"Waiting for consuming segments to catch up (1 behind: {S0} at 99 of 100), "
        f"timeRemaining={WAIT - 1_000}ms"
    )
    assert s.consuming == {(T, S0)}  # S1 caught up: not checked again
    assert s.good is False
    # S1 falls behind again (ignored); S0 reaches its target.
    later = {(T, S0): Consumption(True, 100, 100), (T, S1): Consumption(True, 0, 5)}
    assert s.evaluate(snap(consumption=later), NOW + 2_000) is None
    assert s.good is True


def test_reason_describes_unstarted_and_unknown_target_partitions() -> None:
    s = status()
    found = {(T, S0): Consumption(True, 3, None)}  # S1: consumer not started yet
    reason = s.evaluate(snap(consumption=found), NOW)
    assert reason == (
        f"Waiting for consuming segments to catch up (2 behind: {S0} at 3 of unknown, "
        f"{S1} not started), timeRemaining={WAIT}ms"
    )


def test_consumer_without_offset_is_not_caught_up() -> None:
    s = status()
    found = {(T, S0): Consumption(True, None, 10), (T, S1): Consumption(True, 10, 10)}
    reason = s.evaluate(snap(consumption=found), NOW)
    assert reason == (
        f"Waiting for consuming segments to catch up (1 behind: {S0} not started), "
        f"timeRemaining={WAIT}ms"
    )


def test_partition_no_longer_consumed_counts_as_caught_up() -> None:
    s = status()
    found = {(T, S0): Consumption(False), (T, S1): Consumption(False, 1, 50)}
    assert s.evaluate(snap(consumption=found), NOW) is None


def test_wait_running_out_makes_it_good() -> None:
    s = status()
    behind = {(T, S0): Consumption(True, 0, 100)}
    assert s.evaluate(snap(consumption=behind), NOW + WAIT - 1) == (
        f"Waiting for consuming segments to catch up (2 behind: {S0} at 0 of 100, "
        f"{S1} not started), timeRemaining=1ms"
    )
    assert s.evaluate(snap(consumption=behind), NOW + WAIT) is None
    assert s.good is True
    assert s.consuming == set()


def test_wait_zero_turns_catch_up_off() -> None:
    s = status(wait_ms=0)
    behind = {(T, S0): Consumption(True, 0, 100), (T, S1): Consumption(True, 0, 100)}
    assert s.evaluate(snap(consumption=behind), NOW) is None


def test_offset_checker_off_is_a_static_wait() -> None:
    s = status(offset_checker=False)
    done = caught_up()
    reason = s.evaluate(snap(consumption=done), NOW + 10_000)
    # Pinot's static wait compares no offsets, so its reason names none.
    assert reason == f"Waiting for consuming segments to catchup, timeRemaining={WAIT - 10_000}ms"
    assert s.consuming == {(T, S0), (T, S1)}
    assert s.evaluate(snap(consumption=done), NOW + WAIT) is None


def test_no_consuming_segment_needs_no_wait_even_static() -> None:
    s = status({T: {S0: {ME: "ONLINE"}}}, offset_checker=False)
    matched = {T: {S0: "ONLINE"}}
    assert s.evaluate(snap(ideal=matched, current=matched, external=matched), NOW) is None


def test_state_match_is_checked_before_catch_up() -> None:
    s = status()
    reason = s.evaluate(snap(current={}, consumption={}), NOW)
    assert reason is not None and reason.endswith(f"waitingFor=CurrentStateMatch, resource={T}")
    assert s.consuming == {(T, S0), (T, S1)}  # catch-up not evaluated this round
    assert list(s.pending()) == [T]


def test_state_match_holds_even_after_the_catch_up_wait() -> None:
    s = status()
    reason = s.evaluate(snap(external={}, consumption=caught_up()), NOW + 10 * WAIT)
    assert reason == (
        f"partition={S0}, expected=CONSUMING, found=None, "
        f"waitingFor=ExternalViewMatch, resource={T}"
    )


# --- stays GOOD ----------------------------------------------------------------------------------
def test_stays_good_once_good() -> None:
    s = status(wait_ms=0)
    assert s.evaluate(snap(), NOW) is None
    # Everything falls apart afterwards: Pinot does not re-check a started server.
    assert s.evaluate(snap(ideal={}, current={}, external={}), NOW + 1) is None
    assert s.evaluate(snap(current={T: {S0: "OFFLINE"}}), NOW + 2) is None
    assert s.good is True
    assert s.last_reason is None


def test_starting_reason_is_kept_as_last_reason_and_replaced() -> None:
    s = status(wait_ms=0)
    first = s.evaluate(snap(ideal={}), NOW)
    assert s.last_reason == first == f"IdealState of {T} not read yet"
    second = s.evaluate(snap(current={}), NOW + 1)
    assert s.last_reason == second
    assert second is not None and second.startswith(f"partition={S0}, expected=CONSUMING")
