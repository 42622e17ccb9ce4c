"""The server's segment state model (reference §1.6) and a consuming segment's end criteria (§5.8),
as pure functions: no ZooKeeper, no clock (every `now` is given)."""

from __future__ import annotations

import itertools

import pytest

from tables.domain.segment_states import (
    ROW_LIMIT,
    TIME_LIMIT,
    EndCriteria,
    SegmentState,
    next_step,
)

OFFLINE, CONSUMING, ONLINE = SegmentState.OFFLINE, SegmentState.CONSUMING, SegmentState.ONLINE
DROPPED, ERROR = SegmentState.DROPPED, SegmentState.ERROR

# Helix's SegmentOnlineOfflineStateModel, as reference §1.6 lists it.
MODEL_TRANSITIONS = {
    (OFFLINE, CONSUMING),
    (OFFLINE, ONLINE),
    (CONSUMING, ONLINE),
    (CONSUMING, OFFLINE),
    (ONLINE, OFFLINE),
    (OFFLINE, DROPPED),
    (CONSUMING, DROPPED),
    (ONLINE, DROPPED),
}


def walk(current: str | None, target: str | None, limit: int = 5) -> list[SegmentState]:
    """The states a replica passes through from `current` toward `target`, as the reconcile loop
    runs `next_step` until it answers None."""
    path: list[SegmentState] = []
    here = SegmentState(current) if current else OFFLINE
    for _ in range(limit):
        step = next_step(str(here) if path or current else None, target)
        if step is None:
            return path
        source, here_next = step
        assert source is here, (current, target, path, step)
        here = here_next
        path.append(here)
    raise AssertionError(f"{current} -> {target} did not settle in {limit} steps: {path}")


# --- next_step ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "target"), sorted(MODEL_TRANSITIONS))
def test_every_transition_of_the_model_is_one_step(source, target):
    assert next_step(str(source), str(target)) == (source, target)


@pytest.mark.parametrize("state", [OFFLINE, CONSUMING, ONLINE])
def test_a_replica_already_in_its_target_state_does_nothing(state):
    assert next_step(str(state), str(state)) is None


def test_a_target_of_none_means_dropped():
    assert next_step("ONLINE", None) == (ONLINE, DROPPED)
    assert next_step("CONSUMING", None) == (CONSUMING, DROPPED)
    assert next_step("OFFLINE", None) == (OFFLINE, DROPPED)


def test_a_never_hosted_replica_starts_offline():
    assert next_step(None, "CONSUMING") == (OFFLINE, CONSUMING)
    assert next_step(None, "ONLINE") == (OFFLINE, ONLINE)
    assert next_step(None, "OFFLINE") is None


def test_a_never_hosted_replica_has_nothing_to_drop():
    assert next_step(None, None) is None
    assert next_step(None, "DROPPED") is None


def test_online_to_consuming_goes_through_offline():
    assert next_step("ONLINE", "CONSUMING") == (ONLINE, OFFLINE)
    assert next_step("OFFLINE", "CONSUMING") == (OFFLINE, CONSUMING)
    assert walk("ONLINE", "CONSUMING") == [OFFLINE, CONSUMING]


def test_multi_hop_paths_use_only_the_models_transitions():
    currents = [None, "OFFLINE", "CONSUMING", "ONLINE"]
    targets = [None, "OFFLINE", "CONSUMING", "ONLINE", "DROPPED"]
    for current, target in itertools.product(currents, targets):
        path = walk(current, target)
        here = SegmentState(current) if current else OFFLINE
        for state in path:
            assert (here, state) in MODEL_TRANSITIONS, (current, target, path)
            here = state
        assert len(path) <= 2, (current, target, path)
        if current is None and target in (None, "DROPPED"):
            assert path == []
        else:
            assert here is (SegmentState(target) if target else DROPPED), (current, target, path)


@pytest.mark.parametrize("target", ["OFFLINE", "CONSUMING", "ONLINE", "ERROR"])
def test_error_stays_error_whatever_the_target(target):
    # Leaving ERROR takes a reset (ERROR->OFFLINE), which next_step never plans.
    assert next_step("ERROR", target) is None


def test_error_leaves_with_a_dropped_segment():
    assert next_step("ERROR", None) == (ERROR, DROPPED)
    assert next_step("ERROR", "DROPPED") == (ERROR, DROPPED)


def test_a_target_of_error_is_treated_as_offline():
    assert next_step("ONLINE", "ERROR") == (ONLINE, OFFLINE)
    assert next_step("CONSUMING", "ERROR") == (CONSUMING, OFFLINE)
    assert next_step("OFFLINE", "ERROR") is None


@pytest.mark.parametrize("unknown", ["BOOTSTRAP", "MASTER", "online"])
def test_an_unknown_target_state_is_treated_as_offline(unknown):
    assert next_step("CONSUMING", unknown) == (CONSUMING, OFFLINE)
    assert next_step("ONLINE", unknown) == (ONLINE, OFFLINE)
    assert next_step("OFFLINE", unknown) is None
    assert next_step(None, unknown) is None


# --- EndCriteria ----------------------------------------------------------------------------------

CREATED_MS = 1_626_847_200_000  # 2021-07-21T06:00Z, like the githubEvents fixture rows
WINDOW_MS = 60_000


def criteria(threshold_rows: int = 10) -> EndCriteria:
    return EndCriteria.for_segment(threshold_rows, WINDOW_MS, CREATED_MS)


def test_the_window_ends_one_flush_time_after_creation():
    assert criteria().consume_end_ms == CREATED_MS + WINDOW_MS


def test_row_limit_once_the_segment_holds_its_threshold():
    end = criteria(10)
    assert end.reason(9, CREATED_MS) is None
    assert end.reason(10, CREATED_MS) == ROW_LIMIT
    assert end.reason(11, CREATED_MS) == ROW_LIMIT


def test_row_limit_wins_over_time_limit():
    assert criteria(10).reason(10, CREATED_MS + 10 * WINDOW_MS) == ROW_LIMIT


def test_time_limit_once_the_window_passed_with_rows():
    end = criteria(10)
    assert end.reason(3, CREATED_MS + WINDOW_MS - 1) is None
    assert end.reason(3, CREATED_MS + WINDOW_MS) == TIME_LIMIT
    assert end.reason(1, CREATED_MS + 5 * WINDOW_MS) == TIME_LIMIT
    assert end.consume_end_ms == CREATED_MS + WINDOW_MS  # ending does not move the window


def test_an_empty_window_extends_instead_of_ending():
    end = criteria(10)
    assert end.reason(0, CREATED_MS + WINDOW_MS) is None
    assert end.consume_end_ms == CREATED_MS + 2 * WINDOW_MS
    # Rows that arrive in the new window end the segment at the new end, not the old one.
    assert end.reason(2, CREATED_MS + WINDOW_MS + 1) is None
    assert end.reason(2, CREATED_MS + 2 * WINDOW_MS - 1) is None
    assert end.reason(2, CREATED_MS + 2 * WINDOW_MS) == TIME_LIMIT


def test_an_empty_window_long_past_moves_to_the_first_end_after_now():
    end = criteria(10)
    now = CREATED_MS + 3 * WINDOW_MS + WINDOW_MS // 2
    assert end.reason(0, now) is None
    assert end.consume_end_ms == CREATED_MS + 4 * WINDOW_MS
    assert end.consume_end_ms > now


def test_a_consumer_that_has_not_fetched_yet_fetches_before_ending():
    end = criteria(10)
    late = CREATED_MS + 7 * WINDOW_MS
    assert end.reason(0, late, fetched=False) is None
    assert end.consume_end_ms == CREATED_MS + WINDOW_MS  # not extended: the next check ends it
    assert end.reason(4, late, fetched=True) == TIME_LIMIT


def test_rows_wanted_is_what_remains_before_the_row_limit():
    end = criteria(10)
    assert end.rows_wanted(0) == 10
    assert end.rows_wanted(7) == 3
    assert end.rows_wanted(10) == 0
    assert end.rows_wanted(12) == 0


def test_zero_thresholds_are_raised_to_one():
    end = EndCriteria.for_segment(0, 0, CREATED_MS)
    assert end.threshold_rows == 1
    assert end.window_ms == 1
    assert end.consume_end_ms == CREATED_MS + 1
    assert end.reason(1, CREATED_MS) == ROW_LIMIT
    assert end.rows_wanted(0) == 1


def test_near_is_within_a_margin_of_either_limit():
    end = criteria(threshold_rows=100)
    assert not end.near(94, CREATED_MS, rows_margin=5, ms_margin=1000)
    assert end.near(95, CREATED_MS, rows_margin=5, ms_margin=1000)
    assert not end.near(0, CREATED_MS + WINDOW_MS - 1001, rows_margin=5, ms_margin=1000)
    assert end.near(0, CREATED_MS + WINDOW_MS - 1000, rows_margin=5, ms_margin=1000)
    assert end.reason(95, CREATED_MS) is None  # near is a hint, not the end
