"""The completion FSM's early commit start (tables.domain.completion): a pauseless winner's
segmentConsumed with `start_commit` runs commit start in that call."""

from __future__ import annotations

import pytest

from tables.domain.completion import (
    REASON_ROW_LIMIT,
    REASON_TIME_LIMIT,
    RESP_COMMIT_CONTINUE,
    RESP_COMMIT_SUCCESS,
    FsmState,
    Status,
)
from tests.tables.domain.test_completion import LOCATION, METADATA, S1, S2, T0, make_fsm


def test_the_winners_early_ask_starts_the_commit_once():
    fsm, actions = make_fsm(pauseless=True)
    won = fsm.segment_consumed(S1, 100, REASON_ROW_LIMIT, T0, start_commit=True)  # wins at once

    assert (won.status, won.offset, won.commit_started) == (Status.COMMIT, "100", True)
    assert won.to_json()["commitStarted"] is True
    assert won.build_time_sec is not None and won.build_time_sec > 0
    assert actions.calls == [("commit_to_committing", S1, 100)]
    assert fsm.state is FsmState.COMMITTER_UPLOADING
    # Its own commit start is answered without doing it again; another's, or another offset, not.
    assert fsm.segment_commit_start(S1, 100, T0 + 10) == RESP_COMMIT_CONTINUE
    assert fsm.segment_commit_start(S2, 100, T0 + 10).status is Status.HOLD
    assert actions.names.count("commit_to_committing") == 1
    # The other replica keeps its copy, as after any pauseless commit start.
    assert fsm.segment_consumed(S2, 100, REASON_ROW_LIMIT, T0 + 20).status is Status.KEEP
    assert fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 900) == RESP_COMMIT_SUCCESS
    assert fsm.state is FsmState.COMMITTED


def test_a_winner_decided_earlier_starts_on_its_next_ask():
    fsm, actions = make_fsm(pauseless=True)
    fsm.segment_consumed(S1, 100, REASON_TIME_LIMIT, T0, start_commit=True)
    behind = fsm.segment_consumed(S2, 90, REASON_TIME_LIMIT, T0 + 100, start_commit=True)
    assert behind.status is Status.CATCH_UP and actions.calls == []  # S1 won, not told yet
    assert fsm.state is FsmState.COMMITTER_DECIDED

    won = fsm.segment_consumed(S1, 100, REASON_TIME_LIMIT, T0 + 500, start_commit=True)

    assert won.status is Status.COMMIT and won.commit_started
    assert actions.calls == [("commit_to_committing", S1, 100)]
    assert fsm.state is FsmState.COMMITTER_UPLOADING


@pytest.mark.parametrize("pauseless", [False, True], ids=["blocking", "pauseless"])
def test_without_the_ask_or_in_blocking_mode_commit_start_stays_its_own_call(pauseless):
    fsm, actions = make_fsm(pauseless=pauseless)
    won = fsm.segment_consumed(S1, 100, REASON_ROW_LIMIT, T0, start_commit=not pauseless)

    assert won.status is Status.COMMIT and not won.commit_started
    assert "commitStarted" not in won.to_json()
    assert fsm.state is FsmState.COMMITTER_NOTIFIED
    assert actions.calls == []
    assert fsm.segment_commit_start(S1, 100, T0 + 10) == RESP_COMMIT_CONTINUE
    assert actions.names.count("commit_to_committing") == (1 if pauseless else 0)


def test_an_early_start_that_fails_aborts_and_answers_failed():
    fsm, actions = make_fsm(pauseless=True)
    actions.raise_on.add("commit_to_committing")

    answer = fsm.segment_consumed(S1, 100, REASON_ROW_LIMIT, T0, start_commit=True)

    assert answer.status is Status.FAILED
    assert fsm.state is FsmState.ABORTED
    assert actions.aborts == 1
