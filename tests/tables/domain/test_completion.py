"""Segment completion FSM (reference §5.2-§5.7): every §5.4 transition row in both modes.

The FSM is pure, so time is explicit: it starts at T0 and each call passes its own `now_ms`.
Unless a test says otherwise there are two replicas, S1 wins at offset 100 and S2 lags at 90.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tables.domain.completion import (
    DEFAULT_COMMIT_TIMEOUT_MS,
    DEFAULT_EXTRA_BUILD_TIME_SEC,
    MAX_COMMIT_TIME_MS,
    MAX_HOLD_TIME_MS,
    MAX_TIME_TO_NOTIFY_WINNER_MS,
    MAX_TIME_TO_PICK_WINNER_MS,
    REASON_END_OF_PARTITION_GROUP,
    REASON_FORCE_COMMIT,
    REASON_ROW_LIMIT,
    REASON_TIME_LIMIT,
    RESP_COMMIT_CONTINUE,
    RESP_COMMIT_SUCCESS,
    RESP_DISCARD,
    RESP_FAILED,
    RESP_NOT_LEADER,
    RESP_PROCESSED,
    UNKNOWN_WINNER,
    FsmState,
    Response,
    SegmentCompletionFSM,
    Status,
    initial_commit_time_ms,
)

SEGMENT = "myTable__0__1__20240501T1131Z"
VIP = "http://controller:9000"
LOCATION = "file:/data/myTable/myTable__0__1__20240501T1131Z.tmp.0f1e"
METADATA = {"metadata.properties": "segment.total.docs=100", "creation.meta": "crc"}
S1, S2, S3 = "Server_1_8098", "Server_2_8098", "Server_3_8098"

T0 = 1_700_000_000_000
PICK_DEADLINE = T0 + 3_300
NOTIFY_DEADLINE = T0 + 6_600
COMMIT_DEADLINE = T0 + 126_600  # default initial commit time: 6.6 s + 120 s

BOTH = pytest.mark.parametrize("pauseless", [False, True], ids=["blocking", "pauseless"])


class FakeActions:
    """Records every call; `raise_on` names actions that raise, `during_commit` runs inside the
    commit-end action (while the FSM is COMMITTING)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.raise_on: set[str] = set()
        self.during_commit: Callable[[], None] | None = None

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        if name in self.raise_on:
            raise RuntimeError(f"{name} failed")

    def commit_metadata(
        self, instance: str, offset: int, location: str, metadata: Mapping[str, str]
    ) -> None:
        if self.during_commit:
            self.during_commit()
        self._call("commit_metadata", instance, offset, location, dict(metadata))

    def commit_to_committing(self, instance: str, offset: int) -> None:
        self._call("commit_to_committing", instance, offset)

    def commit_to_done(
        self, instance: str, offset: int, location: str, metadata: Mapping[str, str]
    ) -> None:
        if self.during_commit:
            self.during_commit()
        self._call("commit_to_done", instance, offset, location, dict(metadata))

    def stopped_consuming(self, instance: str, offset: int, reason: str | None) -> None:
        self._call("stopped_consuming", instance, offset, reason)

    def aborted(self) -> None:
        self._call("aborted")

    @property
    def names(self) -> list[str]:
        return [call[0] for call in self.calls]

    @property
    def aborts(self) -> int:
        return self.names.count("aborted")


def make_fsm(
    *, pauseless: bool = False, replicas: int = 2, **kwargs: Any
) -> tuple[SegmentCompletionFSM, FakeActions]:
    actions = FakeActions()
    fsm = SegmentCompletionFSM(
        SEGMENT, replicas, T0, actions, pauseless=pauseless, controller_vip_url=VIP, **kwargs
    )
    return fsm, actions


def fsm_in(state: FsmState, *, pauseless: bool = False) -> tuple[SegmentCompletionFSM, FakeActions]:
    """An FSM driven to `state` the way servers would, with the actions log cleared."""
    fsm, actions = make_fsm(
        pauseless=pauseless, first_message_is_stopped_consuming=state is FsmState.PARTIAL_CONSUMING
    )
    if state is FsmState.COMMITTER_DECIDED:
        fsm.segment_consumed(S1, 100, REASON_TIME_LIMIT, T0)
        fsm.segment_consumed(S2, 90, REASON_TIME_LIMIT, T0 + 100)
    if state in (
        FsmState.COMMITTER_NOTIFIED,
        FsmState.COMMITTER_UPLOADING,
        FsmState.COMMITTED,
        FsmState.ABORTED,
    ):
        fsm.segment_consumed(S1, 100, REASON_ROW_LIMIT, T0)
    if state in (FsmState.COMMITTER_UPLOADING, FsmState.COMMITTED):
        fsm.segment_commit_start(S1, 100, T0 + 1_000)
    if state is FsmState.COMMITTED:
        fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 2_000)
    if state is FsmState.ABORTED:
        fsm.segment_commit_start(S1, 99, T0 + 1_000)
    assert fsm.state is state
    actions.calls.clear()
    return fsm, actions


def while_committing(
    call: Callable[[SegmentCompletionFSM], Response], *, pauseless: bool = False
) -> tuple[Response, FakeActions]:
    """Runs `call` from inside the commit-end action, the only moment COMMITTING is visible."""
    fsm, actions = fsm_in(FsmState.COMMITTER_UPLOADING, pauseless=pauseless)
    seen: list[Response] = []

    def hook() -> None:
        assert fsm.state is FsmState.COMMITTING
        seen.append(call(fsm))

    actions.during_commit = hook
    fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 2_000)
    return seen[0], actions


def hold(offset: int) -> Response:
    return Response(Status.HOLD, str(offset))


def chosen_hold(offset: int) -> Response:
    """HOLD for a replica while another one is the chosen committer."""
    return Response(Status.HOLD, str(offset), committer_chosen=True)


def catch_up(offset: int) -> Response:
    return Response(Status.CATCH_UP, str(offset))


def keep(offset: int) -> Response:
    return Response(Status.KEEP, str(offset))


def commit(offset: int, build_time_sec: int = 126) -> Response:
    return Response(Status.COMMIT, str(offset), build_time_sec, controller_vip_url=VIP)


def assert_aborted_once(fsm: SegmentCompletionFSM, actions: FakeActions) -> None:
    assert fsm.state is FsmState.ABORTED
    assert fsm.is_done
    assert actions.aborts == 1


# --- response JSON (§5.3) -------------------------------------------------------------------------


def test_commit_response_serializes_like_the_reference_example() -> None:
    response = Response(Status.COMMIT, "6000000", 126, controller_vip_url=VIP)
    assert json.dumps(response.to_json(), separators=(",", ":")) == (
        '{"status":"COMMIT","streamPartitionMsgOffset":"6000000","buildTimeSec":126,'
        '"isSplitCommitType":true,"controllerVipUrl":"http://controller:9000"}'
    )


@pytest.mark.parametrize(
    "canned",
    [
        RESP_FAILED,
        RESP_DISCARD,
        RESP_NOT_LEADER,
        RESP_PROCESSED,
        RESP_COMMIT_CONTINUE,
        RESP_COMMIT_SUCCESS,
    ],
    ids=lambda r: str(r.status),
)
def test_canned_responses_serialize_null_offset_and_minus_one_build_time(canned: Response) -> None:
    assert canned.to_json() == {
        "status": str(canned.status),
        "streamPartitionMsgOffset": None,
        "buildTimeSec": -1,
        "isSplitCommitType": True,
    }
    assert '"streamPartitionMsgOffset": null' in json.dumps(canned.to_json())


def test_segment_location_is_serialized_only_when_set() -> None:
    upload = Response(Status.UPLOAD_SUCCESS, "6000000", segment_location="file:/tmp/s.tmp.1")
    assert upload.to_json()["segmentLocation"] == "file:/tmp/s.tmp.1"
    assert "controllerVipUrl" not in upload.to_json()
    assert "segmentLocation" not in hold(5).to_json()


@pytest.mark.parametrize(
    "response",
    [
        RESP_FAILED,
        hold(7),
        commit(6_000_000),
        Response(Status.UPLOAD_SUCCESS, "1", segment_location="peer:///seg"),
        chosen_hold(8),
    ],
    ids=["failed", "hold", "commit", "upload", "chosen-hold"],
)
def test_response_json_round_trips(response: Response) -> None:
    assert Response.from_json(json.loads(json.dumps(response.to_json()))) == response


def test_committer_chosen_is_serialized_only_when_set() -> None:
    assert chosen_hold(5).to_json()["committerChosen"] is True
    assert "committerChosen" not in hold(5).to_json()
    assert "committerChosen" not in commit(5).to_json()


def test_status_has_every_protocol_status() -> None:
    assert {s.value for s in Status} == {
        "NOT_SENT",
        "COMMIT",
        "HOLD",
        "CATCH_UP",
        "DISCARD",
        "KEEP",
        "NOT_LEADER",
        "FAILED",
        "COMMIT_SUCCESS",
        "COMMIT_CONTINUE",
        "PROCESSED",
        "UPLOAD_SUCCESS",
    }


# --- timers and initial state (§5.4 creation, §5.5) -----------------------------------------------


def test_timer_constants() -> None:
    assert MAX_HOLD_TIME_MS == 3_000
    assert MAX_TIME_TO_PICK_WINNER_MS == 3_300
    assert MAX_TIME_TO_NOTIFY_WINNER_MS == 6_600
    assert DEFAULT_COMMIT_TIMEOUT_MS == 120_000
    assert MAX_COMMIT_TIME_MS == 1_800_000
    assert DEFAULT_EXTRA_BUILD_TIME_SEC == 120


@pytest.mark.parametrize(
    ("table_timeout_ms", "remembered_ms", "expected"),
    [
        (120_000, None, 126_600),
        (120_000, 100_000, 126_600),  # a smaller remembered time is ignored
        (120_000, 300_000, 300_000),  # a larger remembered time wins
        (30_000, None, 36_600),
        (3_600_000, None, 1_800_000),  # capped
        (120_000, 2_000_000, 1_800_000),
    ],
)
def test_initial_commit_time(
    table_timeout_ms: int, remembered_ms: int | None, expected: int
) -> None:
    assert initial_commit_time_ms(table_timeout_ms, remembered_ms) == expected


def test_commit_deadline_uses_table_timeout_and_remembered_time() -> None:
    assert make_fsm()[0].commit_deadline_ms == COMMIT_DEADLINE
    assert make_fsm(commit_timeout_ms=30_000)[0].commit_deadline_ms == T0 + 36_600
    fsm, _ = make_fsm(remembered_commit_time_ms=400_000)
    assert fsm.commit_deadline_ms == T0 + 400_000
    assert fsm.initial_commit_time_ms == 400_000


@BOTH
@pytest.mark.parametrize("zk_status", ["IN_PROGRESS", "COMMITTING"])
def test_in_progress_or_committing_segment_starts_holding(pauseless: bool, zk_status: str) -> None:
    fsm, _ = make_fsm(pauseless=pauseless, zk_status=zk_status, zk_end_offset=100)
    assert fsm.state is FsmState.HOLDING
    assert fsm.winner is None
    assert fsm.winning_offset is None
    assert not fsm.is_done


@BOTH
@pytest.mark.parametrize("zk_status", ["DONE", "UPLOADED"])
def test_completed_segment_starts_committed_with_unknown_winner(
    pauseless: bool, zk_status: str
) -> None:
    fsm, _ = make_fsm(
        pauseless=pauseless,
        zk_status=zk_status,
        zk_end_offset=500,
        first_message_is_stopped_consuming=True,
    )
    assert fsm.state is FsmState.COMMITTED
    assert fsm.winner == UNKNOWN_WINNER
    assert fsm.winning_offset == 500
    assert fsm.is_done


def test_completed_segment_without_end_offset_is_refused() -> None:
    with pytest.raises(ValueError, match="end offset"):
        make_fsm(zk_status="DONE")


def test_first_message_stopped_consuming_starts_partial_consuming() -> None:
    fsm, _ = make_fsm(first_message_is_stopped_consuming=True)
    assert fsm.state is FsmState.PARTIAL_CONSUMING


# --- segmentConsumed: PARTIAL_CONSUMING and HOLDING, winner selection (§5.6) ----------------------


@BOTH
def test_partial_consuming_moves_to_holding_then_acts_as_holding(pauseless: bool) -> None:
    fsm, _ = fsm_in(FsmState.PARTIAL_CONSUMING, pauseless=pauseless)
    assert fsm.segment_consumed(S1, 100, None, T0 + 10) == hold(100)
    assert fsm.state is FsmState.HOLDING


def test_partial_consuming_after_stopped_replica_picks_among_the_rest() -> None:
    fsm, actions = make_fsm(replicas=3, first_message_is_stopped_consuming=True)
    assert fsm.stopped_consuming(S3, 40, "error", T0) == RESP_PROCESSED
    assert fsm.segment_consumed(S1, 100, None, T0 + 10) == hold(100)
    assert fsm.segment_consumed(S2, 100, None, T0 + 20) == commit(100)  # 2 == 3 - 1 reported
    assert (fsm.state, fsm.winner) == (FsmState.COMMITTER_NOTIFIED, S2)
    assert actions.names == ["stopped_consuming"]


@BOTH
def test_holding_without_winner_answers_hold_with_reporters_offset(pauseless: bool) -> None:
    fsm, actions = make_fsm(pauseless=pauseless, replicas=3)
    assert fsm.segment_consumed(S1, 100, REASON_TIME_LIMIT, T0) == hold(100)
    assert fsm.segment_consumed(S2, 90, None, T0 + 1_000) == hold(90)
    assert fsm.state is FsmState.HOLDING
    assert fsm.winner is None
    assert dict(fsm.reported_offsets) == {S1: 100, S2: 90}
    assert actions.calls == []


@BOTH
@pytest.mark.parametrize("reason", [REASON_ROW_LIMIT, REASON_END_OF_PARTITION_GROUP])
def test_single_reporter_at_row_limit_or_end_of_partition_wins_at_once(
    pauseless: bool, reason: str
) -> None:
    fsm, _ = make_fsm(pauseless=pauseless, replicas=3)
    assert fsm.segment_consumed(S1, 100, reason, T0) == commit(100)
    assert (fsm.state, fsm.winner, fsm.winning_offset) == (FsmState.COMMITTER_NOTIFIED, S1, 100)


@pytest.mark.parametrize("reason", [REASON_TIME_LIMIT, REASON_FORCE_COMMIT, None])
def test_single_reporter_for_other_reasons_holds(reason: str | None) -> None:
    fsm, _ = make_fsm(replicas=3)
    assert fsm.segment_consumed(S1, 100, reason, T0) == hold(100)
    assert fsm.state is FsmState.HOLDING


def test_row_limit_does_not_win_at_once_when_others_reported_first() -> None:
    fsm, _ = make_fsm(replicas=3)
    fsm.segment_consumed(S1, 90, REASON_TIME_LIMIT, T0)
    assert fsm.segment_consumed(S2, 100, REASON_ROW_LIMIT, T0 + 10) == hold(100)
    assert fsm.winner is None


def test_all_replicas_reported_lagging_reporter_catches_up_to_max() -> None:
    fsm, _ = make_fsm(replicas=3)
    fsm.segment_consumed(S1, 100, None, T0)
    fsm.segment_consumed(S2, 90, None, T0 + 10)
    assert fsm.segment_consumed(S3, 80, None, T0 + 20) == catch_up(100)
    assert (fsm.state, fsm.winner, fsm.winning_offset) == (FsmState.COMMITTER_DECIDED, S1, 100)


def test_all_replicas_reported_reporter_with_max_offset_commits() -> None:
    fsm, _ = make_fsm(replicas=3)
    fsm.segment_consumed(S1, 90, None, T0)
    fsm.segment_consumed(S2, 80, None, T0 + 10)
    assert fsm.segment_consumed(S3, 100, None, T0 + 20) == commit(100)
    assert (fsm.state, fsm.winner) == (FsmState.COMMITTER_NOTIFIED, S3)


def test_tie_on_max_offset_goes_to_current_reporter() -> None:
    fsm, _ = make_fsm(replicas=2)
    fsm.segment_consumed(S1, 100, None, T0)
    assert fsm.segment_consumed(S2, 100, None, T0 + 10) == commit(100)
    assert fsm.winner == S2


def test_tie_among_other_replicas_goes_to_the_first_reported() -> None:
    fsm, _ = make_fsm(replicas=3)
    fsm.segment_consumed(S1, 100, None, T0)
    fsm.segment_consumed(S2, 100, None, T0 + 10)
    fsm.segment_consumed(S3, 50, None, PICK_DEADLINE + 1)
    assert fsm.winner == S1


@pytest.mark.parametrize(
    ("now", "expected"),
    [(PICK_DEADLINE, hold(90)), (PICK_DEADLINE + 1, catch_up(100))],
    ids=["at-deadline", "after-deadline"],
)
def test_pick_deadline_passed_with_fewer_reports_picks_max(now: int, expected: Response) -> None:
    fsm, _ = make_fsm(replicas=3)
    fsm.segment_consumed(S1, 100, None, T0)
    assert fsm.segment_consumed(S2, 90, None, now) == expected


def test_pick_deadline_passed_single_reporter_commits() -> None:
    fsm, _ = make_fsm(replicas=3)
    fsm.segment_consumed(S1, 100, None, T0)
    assert fsm.segment_consumed(S1, 100, None, PICK_DEADLINE + 1) == commit(100)


def test_excluded_replica_is_not_waited_for() -> None:
    fsm, _ = make_fsm(replicas=3)
    fsm.stopped_consuming(S3, 10, "error", T0)
    fsm.segment_consumed(S1, 90, None, T0 + 10)
    assert fsm.segment_consumed(S2, 100, None, T0 + 20) == commit(100)


def test_excluded_replica_reporting_again_is_counted_again() -> None:
    fsm, _ = make_fsm(replicas=3)
    fsm.stopped_consuming(S3, 10, "error", T0)
    assert fsm.segment_consumed(S3, 100, None, T0 + 10) == hold(100)
    assert fsm.excluded_instances == frozenset()
    assert fsm.segment_consumed(S1, 100, None, T0 + 20) == hold(100)  # 2 of 3 reported
    assert fsm.segment_consumed(S2, 90, None, T0 + 30) == catch_up(100)


def test_more_reports_than_expected_waits_for_pick_deadline() -> None:
    # Pinot compares reports == replicas - excluded exactly; S1 reported before it was excluded.
    fsm, _ = make_fsm(replicas=2)
    fsm.segment_consumed(S1, 100, None, T0)
    fsm.stopped_consuming(S1, 100, "error", T0 + 10)
    assert fsm.segment_consumed(S2, 90, None, T0 + 20) == hold(90)
    assert fsm.segment_consumed(S2, 90, None, PICK_DEADLINE + 1) == catch_up(100)


# --- segmentConsumed: COMMITTER_DECIDED -----------------------------------------------------------


@BOTH
def test_decided_winner_at_winning_offset_gets_commit(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_DECIDED, pauseless=pauseless)
    assert fsm.segment_consumed(S1, 100, None, T0 + 3_000) == commit(100)
    assert fsm.state is FsmState.COMMITTER_NOTIFIED
    assert actions.calls == []


@BOTH
@pytest.mark.parametrize(
    ("instance", "offset", "expected"),
    [(S2, 100, chosen_hold(100)), (S2, 95, catch_up(100)), (S3, 10, catch_up(100))],
    ids=["non-winner-equal", "non-winner-lower", "newcomer-lower"],
)
def test_decided_non_winner_holds_or_catches_up(
    pauseless: bool, instance: str, offset: int, expected: Response
) -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_DECIDED, pauseless=pauseless)
    assert fsm.segment_consumed(instance, offset, None, T0 + 3_000) == expected
    assert fsm.state is FsmState.COMMITTER_DECIDED


@BOTH
@pytest.mark.parametrize(
    ("instance", "offset"),
    [(S2, 101), (S1, 101), (S1, 99)],
    ids=["offset-above-winning", "winner-above", "winner-below"],
)
def test_decided_unexpected_offset_aborts_with_hold(
    pauseless: bool, instance: str, offset: int
) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_DECIDED, pauseless=pauseless)
    assert fsm.segment_consumed(instance, offset, None, T0 + 3_000) == hold(offset)
    assert_aborted_once(fsm, actions)


@BOTH
@pytest.mark.parametrize(
    ("instance", "offset"),
    [(S1, 100), (S2, 100), (S2, 95), (S1, 99)],
    ids=["winner-equal", "non-winner-equal", "non-winner-lower", "winner-different"],
)
def test_decided_after_notify_deadline_aborts_once_with_hold(
    pauseless: bool, instance: str, offset: int
) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_DECIDED, pauseless=pauseless)
    assert fsm.segment_consumed(instance, offset, None, NOTIFY_DEADLINE + 1) == hold(offset)
    assert_aborted_once(fsm, actions)


def test_decided_at_notify_deadline_still_commits() -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_DECIDED)
    assert fsm.segment_consumed(S1, 100, None, NOTIFY_DEADLINE) == commit(100)


# --- segmentConsumed: COMMITTER_NOTIFIED ----------------------------------------------------------


@BOTH
def test_notified_winner_reporting_again_gets_commit_resent(pauseless: bool) -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    assert fsm.segment_consumed(S1, 100, None, T0 + 60_000) == commit(100)
    assert fsm.state is FsmState.COMMITTER_NOTIFIED


@BOTH
def test_notified_winner_with_other_offset_is_discarded_without_abort_meter(
    pauseless: bool,
) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    assert fsm.segment_consumed(S1, 105, None, T0 + 1_000) == RESP_DISCARD
    assert fsm.state is FsmState.ABORTED
    assert actions.aborts == 0  # Pinot sets ABORTED here without the meter


@BOTH
@pytest.mark.parametrize(
    ("offset", "expected"),
    [(100, chosen_hold(100)), (90, catch_up(100)), (120, chosen_hold(120))],
    ids=["equal", "lower", "higher"],
)
def test_notified_non_winner(pauseless: bool, offset: int, expected: Response) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    assert fsm.segment_consumed(S2, offset, None, T0 + 1_000) == expected
    assert fsm.state is FsmState.COMMITTER_NOTIFIED
    assert actions.calls == []


@BOTH
@pytest.mark.parametrize("instance", [S1, S2])
def test_notified_past_commit_deadline_aborts_with_hold(pauseless: bool, instance: str) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    assert fsm.segment_consumed(instance, 100, None, COMMIT_DEADLINE + 1) == hold(100)
    assert_aborted_once(fsm, actions)


def test_notified_at_commit_deadline_is_not_too_late() -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_NOTIFIED)
    assert fsm.segment_consumed(S1, 100, None, COMMIT_DEADLINE) == commit(100)


# --- segmentConsumed: COMMITTER_UPLOADING and COMMITTING ------------------------------------------


@BOTH
def test_uploading_non_winner_at_winning_offset_holds_or_keeps_when_pauseless(
    pauseless: bool,
) -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_UPLOADING, pauseless=pauseless)
    expected = keep(100) if pauseless else chosen_hold(100)
    assert fsm.segment_consumed(S2, 100, None, T0 + 5_000) == expected
    assert fsm.state is FsmState.COMMITTER_UPLOADING


@BOTH
@pytest.mark.parametrize(
    ("offset", "expected"),
    [(90, catch_up(100)), (120, chosen_hold(120))],
    ids=["lower", "higher"],
)
def test_uploading_non_winner_other_offset(
    pauseless: bool, offset: int, expected: Response
) -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_UPLOADING, pauseless=pauseless)
    assert fsm.segment_consumed(S2, offset, None, T0 + 5_000) == expected
    assert fsm.state is FsmState.COMMITTER_UPLOADING


@BOTH
@pytest.mark.parametrize(
    ("instance", "now"),
    [(S1, T0 + 5_000), (S2, COMMIT_DEADLINE + 1)],
    ids=["winner-reporting", "too-late"],
)
def test_uploading_winner_reporting_or_too_late_aborts_with_hold(
    pauseless: bool, instance: str, now: int
) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_UPLOADING, pauseless=pauseless)
    assert fsm.segment_consumed(instance, 100, None, now) == hold(100)
    assert_aborted_once(fsm, actions)


@BOTH
@pytest.mark.parametrize(
    ("instance", "offset", "now", "blocking", "pauseless_expected", "aborts"),
    [
        (S2, 100, T0 + 5_000, chosen_hold(100), keep(100), 0),
        (S2, 90, T0 + 5_000, catch_up(100), catch_up(100), 0),
        (S2, 120, T0 + 5_000, chosen_hold(120), chosen_hold(120), 0),
        (S1, 100, T0 + 5_000, hold(100), hold(100), 1),
        (S2, 100, COMMIT_DEADLINE + 1, hold(100), hold(100), 1),
    ],
    ids=["equal", "lower", "higher", "winner-reporting", "too-late"],
)
def test_committing_consumed_rows(
    pauseless: bool,
    instance: str,
    offset: int,
    now: int,
    blocking: Response,
    pauseless_expected: Response,
    aborts: int,
) -> None:
    response, actions = while_committing(
        lambda fsm: fsm.segment_consumed(instance, offset, None, now), pauseless=pauseless
    )
    assert response == (pauseless_expected if pauseless else blocking)
    assert actions.aborts == aborts


# --- segmentConsumed: COMMITTED and ABORTED -------------------------------------------------------


@BOTH
@pytest.mark.parametrize(
    ("offset", "expected"), [(100, keep(100)), (90, RESP_DISCARD), (110, RESP_DISCARD)]
)
def test_committed_keeps_winning_offset_discards_others(
    pauseless: bool, offset: int, expected: Response
) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTED, pauseless=pauseless)
    assert fsm.segment_consumed(S2, offset, None, T0 + 3_000) == expected
    assert fsm.state is FsmState.COMMITTED
    assert actions.calls == []


@pytest.mark.parametrize(("offset", "expected"), [(500, keep(500)), (499, RESP_DISCARD)])
def test_committed_from_zk_compares_with_end_offset(offset: int, expected: Response) -> None:
    fsm, _ = make_fsm(zk_status="DONE", zk_end_offset=500)
    assert fsm.segment_consumed(S1, offset, REASON_ROW_LIMIT, T0) == expected


@BOTH
def test_aborted_answers_hold_to_everyone(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.ABORTED, pauseless=pauseless)
    assert fsm.segment_consumed(S1, 100, REASON_ROW_LIMIT, T0 + 2_000) == hold(100)
    assert fsm.segment_consumed(S2, 90, None, T0 + 2_000) == hold(90)
    assert fsm.state is FsmState.ABORTED
    assert actions.calls == []


# --- segmentCommitStart ---------------------------------------------------------------------------


@BOTH
def test_commit_start_by_notified_winner_continues_to_uploading(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    assert fsm.segment_commit_start(S1, 100, T0 + 30_000) == RESP_COMMIT_CONTINUE
    assert fsm.state is FsmState.COMMITTER_UPLOADING
    expected = [("commit_to_committing", S1, 100)] if pauseless else []
    assert actions.calls == expected
    assert fsm.observed_commit_time_ms is None


@BOTH
def test_commit_start_by_non_winner_in_notified_is_accepted(pauseless: bool) -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    assert fsm.segment_commit_start(S2, 90, T0 + 1_000) == RESP_COMMIT_CONTINUE
    assert fsm.state is FsmState.COMMITTER_UPLOADING
    # ... and refused at commit end.
    assert fsm.segment_commit_end(S2, 90, LOCATION, METADATA, T0 + 2_000) == RESP_FAILED


@BOTH
@pytest.mark.parametrize(
    ("offset", "now"),
    [(99, T0 + 1_000), (100, COMMIT_DEADLINE + 1)],
    ids=["winner-other-offset", "too-late"],
)
def test_commit_start_in_notified_aborts_with_hold(pauseless: bool, offset: int, now: int) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    assert fsm.segment_commit_start(S1, offset, now) == hold(offset)
    assert_aborted_once(fsm, actions)
    assert "commit_to_committing" not in actions.names


def test_pauseless_commit_start_failure_aborts_with_failed() -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=True)
    actions.raise_on.add("commit_to_committing")
    assert fsm.segment_commit_start(S1, 100, T0 + 1_000) == RESP_FAILED
    assert_aborted_once(fsm, actions)
    assert actions.names == ["commit_to_committing", "aborted"]


def test_commit_start_after_extended_build_records_observed_commit_time() -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_NOTIFIED)
    assert fsm.extend_build_time(S1, 100, 200, T0 + 100_000) == RESP_PROCESSED
    assert fsm.segment_commit_start(S1, 100, T0 + 200_000) == RESP_COMMIT_CONTINUE
    assert fsm.observed_commit_time_ms == 200_000


@BOTH
def test_commit_start_within_initial_commit_time_records_nothing(pauseless: bool) -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    assert fsm.segment_commit_start(S1, 100, COMMIT_DEADLINE) == RESP_COMMIT_CONTINUE
    assert fsm.observed_commit_time_ms is None


@BOTH
def test_remembered_commit_time_feeds_next_fsm(pauseless: bool) -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_NOTIFIED)
    fsm.extend_build_time(S1, 100, 300, T0 + 1_000)
    fsm.segment_commit_start(S1, 100, T0 + 250_000)
    remembered = fsm.observed_commit_time_ms
    following, _ = make_fsm(pauseless=pauseless, remembered_commit_time_ms=remembered)
    assert following.commit_deadline_ms == T0 + 250_000
    assert following.segment_consumed(S1, 7, REASON_ROW_LIMIT, T0) == commit(7, 250)


@BOTH
@pytest.mark.parametrize(
    "state",
    [
        FsmState.PARTIAL_CONSUMING,
        FsmState.HOLDING,
        FsmState.COMMITTER_DECIDED,
        FsmState.COMMITTER_UPLOADING,
    ],
)
@pytest.mark.parametrize("instance", [S1, S2])
def test_commit_start_out_of_turn_holds(pauseless: bool, state: FsmState, instance: str) -> None:
    fsm, actions = fsm_in(state, pauseless=pauseless)
    assert fsm.segment_commit_start(instance, 100, T0 + 3_000) == hold(100)
    assert fsm.state is state
    assert actions.calls == []


@BOTH
@pytest.mark.parametrize(
    "state",
    [
        FsmState.PARTIAL_CONSUMING,
        FsmState.HOLDING,
        FsmState.COMMITTER_DECIDED,
        FsmState.COMMITTER_UPLOADING,
    ],
)
def test_commit_start_out_of_turn_too_late_aborts_with_hold(
    pauseless: bool, state: FsmState
) -> None:
    fsm, actions = fsm_in(state, pauseless=pauseless)
    assert fsm.segment_commit_start(S1, 100, COMMIT_DEADLINE + 1) == hold(100)
    assert_aborted_once(fsm, actions)


@BOTH
@pytest.mark.parametrize(
    ("now", "expected", "aborts"),
    [(T0 + 3_000, hold(100), 0), (COMMIT_DEADLINE + 1, hold(100), 1)],
    ids=["in-time", "too-late"],
)
def test_commit_start_while_committing(
    pauseless: bool, now: int, expected: Response, aborts: int
) -> None:
    response, actions = while_committing(
        lambda fsm: fsm.segment_commit_start(S2, 100, now), pauseless=pauseless
    )
    assert response == expected
    assert actions.aborts == aborts


@BOTH
@pytest.mark.parametrize(("offset", "expected"), [(100, keep(100)), (90, RESP_DISCARD)])
def test_commit_start_when_committed_keeps_or_discards(
    pauseless: bool, offset: int, expected: Response
) -> None:
    fsm, _ = fsm_in(FsmState.COMMITTED, pauseless=pauseless)
    assert fsm.segment_commit_start(S2, offset, T0 + 3_000) == expected
    assert fsm.state is FsmState.COMMITTED


@BOTH
def test_commit_start_when_aborted_holds(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.ABORTED, pauseless=pauseless)
    assert fsm.segment_commit_start(S1, 100, COMMIT_DEADLINE + 1) == hold(100)
    assert actions.calls == []


@BOTH
def test_commit_start_from_excluded_instance_fails_without_abort(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_NOTIFIED, pauseless=pauseless)
    fsm.stopped_consuming(S1, 100, "error", T0 + 500)
    actions.calls.clear()
    assert fsm.segment_commit_start(S1, 100, T0 + 1_000) == RESP_FAILED
    assert fsm.state is FsmState.COMMITTER_NOTIFIED
    assert actions.calls == []


# --- segmentCommitEnd -----------------------------------------------------------------------------


@BOTH
def test_commit_end_by_uploading_winner_commits(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_UPLOADING, pauseless=pauseless)
    response = fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 2_000)
    assert response == RESP_COMMIT_SUCCESS
    assert fsm.state is FsmState.COMMITTED
    assert fsm.is_done
    action = "commit_to_done" if pauseless else "commit_metadata"
    assert actions.calls == [(action, S1, 100, LOCATION, METADATA)]


@BOTH
def test_commit_end_action_failure_aborts_with_failed(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_UPLOADING, pauseless=pauseless)
    actions.raise_on.update({"commit_metadata", "commit_to_done"})
    assert fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 2_000) == RESP_FAILED
    assert_aborted_once(fsm, actions)


@BOTH
def test_commit_end_from_excluded_winner_aborts_with_failed(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_UPLOADING, pauseless=pauseless)
    fsm.stopped_consuming(S1, 100, "error", T0 + 1_500)
    actions.calls.clear()
    assert fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 2_000) == RESP_FAILED
    assert_aborted_once(fsm, actions)
    assert actions.names == ["aborted"]


@BOTH
@pytest.mark.parametrize(
    ("instance", "offset"), [(S2, 100), (S1, 99)], ids=["not-winner", "other-offset"]
)
def test_commit_end_by_wrong_instance_or_offset_aborts_with_failed(
    pauseless: bool, instance: str, offset: int
) -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_UPLOADING, pauseless=pauseless)
    assert fsm.segment_commit_end(instance, offset, LOCATION, METADATA, T0 + 2_000) == RESP_FAILED
    assert_aborted_once(fsm, actions)
    assert actions.names == ["aborted"]


@BOTH
@pytest.mark.parametrize(
    "state",
    [
        FsmState.PARTIAL_CONSUMING,
        FsmState.HOLDING,
        FsmState.COMMITTER_DECIDED,
        FsmState.COMMITTER_NOTIFIED,
        FsmState.COMMITTED,
        FsmState.ABORTED,
    ],
)
def test_commit_end_outside_uploading_aborts_with_failed(pauseless: bool, state: FsmState) -> None:
    fsm, actions = fsm_in(state, pauseless=pauseless)
    assert fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 2_000) == RESP_FAILED
    assert_aborted_once(fsm, actions)


@BOTH
def test_commit_end_while_committing_aborts_with_failed(pauseless: bool) -> None:
    response, actions = while_committing(
        lambda fsm: fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 2_000),
        pauseless=pauseless,
    )
    assert response == RESP_FAILED
    assert actions.aborts == 1


# --- stoppedConsuming -----------------------------------------------------------------------------

_LIVE_STATES = [
    FsmState.PARTIAL_CONSUMING,
    FsmState.HOLDING,
    FsmState.COMMITTER_DECIDED,
    FsmState.COMMITTER_NOTIFIED,
    FsmState.COMMITTER_UPLOADING,
    FsmState.COMMITTED,
]


@BOTH
@pytest.mark.parametrize("state", _LIVE_STATES)
def test_stopped_consuming_is_processed_and_excludes_instance(
    pauseless: bool, state: FsmState
) -> None:
    fsm, actions = fsm_in(state, pauseless=pauseless)
    assert fsm.stopped_consuming(S2, 95, "consumer error", T0 + 2_500) == RESP_PROCESSED
    assert actions.calls == [("stopped_consuming", S2, 95, "consumer error")]
    assert fsm.state is state
    assert S2 in fsm.excluded_instances


@BOTH
def test_stopped_consuming_while_committing_is_processed(pauseless: bool) -> None:
    response, actions = while_committing(
        lambda fsm: fsm.stopped_consuming(S2, 95, None, T0 + 2_000), pauseless=pauseless
    )
    assert response == RESP_PROCESSED
    assert ("stopped_consuming", S2, 95, None) in actions.calls


@BOTH
def test_stopped_consuming_when_aborted_is_processed_without_action(pauseless: bool) -> None:
    fsm, actions = fsm_in(FsmState.ABORTED, pauseless=pauseless)
    assert fsm.stopped_consuming(S2, 95, None, T0 + 2_000) == RESP_PROCESSED
    assert actions.calls == []


@BOTH
@pytest.mark.parametrize("state", _LIVE_STATES)
def test_stopped_consuming_action_failure_answers_failed_without_abort(
    pauseless: bool, state: FsmState
) -> None:
    fsm, actions = fsm_in(state, pauseless=pauseless)
    actions.raise_on.add("stopped_consuming")
    assert fsm.stopped_consuming(S2, 95, None, T0 + 2_000) == RESP_FAILED
    assert fsm.state is state
    assert actions.aborts == 0
    assert S2 in fsm.excluded_instances


# --- extendBuildTime ------------------------------------------------------------------------------


def _building_state(pauseless: bool) -> FsmState:
    return FsmState.COMMITTER_UPLOADING if pauseless else FsmState.COMMITTER_NOTIFIED


@BOTH
def test_extend_build_time_moves_commit_deadline(pauseless: bool) -> None:
    fsm, actions = fsm_in(_building_state(pauseless), pauseless=pauseless)
    assert fsm.extend_build_time(S1, 100, 300, T0 + 100_000) == RESP_PROCESSED
    assert fsm.commit_deadline_ms == T0 + 400_000
    assert fsm.state is _building_state(pauseless)
    assert actions.calls == []
    # The old deadline no longer applies.
    assert fsm.segment_consumed(S2, 90, None, COMMIT_DEADLINE + 1) == catch_up(100)


def test_extend_build_time_shows_in_resent_commit() -> None:
    fsm, _ = fsm_in(FsmState.COMMITTER_NOTIFIED)
    fsm.extend_build_time(S1, 100, 300, T0 + 100_000)
    assert fsm.segment_consumed(S1, 100, None, T0 + 101_000) == commit(100, 400)


@BOTH
@pytest.mark.parametrize("extra", [0, -5])
def test_extend_build_time_defaults_to_120_seconds(pauseless: bool, extra: int) -> None:
    fsm, _ = fsm_in(_building_state(pauseless), pauseless=pauseless)
    assert fsm.extend_build_time(S1, 100, extra, T0 + 50_000) == RESP_PROCESSED
    assert fsm.commit_deadline_ms == T0 + 170_000


@BOTH
def test_extend_build_time_may_shorten_the_deadline(pauseless: bool) -> None:
    fsm, _ = fsm_in(_building_state(pauseless), pauseless=pauseless)
    assert fsm.extend_build_time(S2, 1, 10, T0 + 5_000) == RESP_PROCESSED  # no winner check
    assert fsm.commit_deadline_ms == T0 + 15_000


@BOTH
def test_extend_build_time_too_late_aborts_with_hold(pauseless: bool) -> None:
    fsm, actions = fsm_in(_building_state(pauseless), pauseless=pauseless)
    assert fsm.extend_build_time(S1, 100, 60, COMMIT_DEADLINE + 1) == hold(100)
    assert_aborted_once(fsm, actions)


@BOTH
@pytest.mark.parametrize(
    ("now", "extra", "expected"),
    [
        (T0 + 1_000, 1_799, RESP_PROCESSED),  # deadline exactly start + 1800 s
        (T0 + 1_001, 1_799, RESP_FAILED),
        (T0 + 100_000, 3_600, RESP_FAILED),
    ],
    ids=["at-max", "just-beyond-max", "far-beyond-max"],
)
def test_extend_build_time_beyond_max_commit_time_aborts_with_failed(
    pauseless: bool, now: int, extra: int, expected: Response
) -> None:
    fsm, actions = fsm_in(_building_state(pauseless), pauseless=pauseless)
    assert fsm.extend_build_time(S1, 100, extra, now) == expected
    if expected == RESP_FAILED:
        assert_aborted_once(fsm, actions)
    else:
        assert fsm.commit_deadline_ms == T0 + MAX_COMMIT_TIME_MS


_NOT_BUILDING = [
    (pauseless, state)
    for pauseless in (False, True)
    for state in (*_LIVE_STATES, FsmState.ABORTED)
    if state is not _building_state(pauseless)
]


@pytest.mark.parametrize(("pauseless", "state"), _NOT_BUILDING)
def test_extend_build_time_in_other_states_fails_without_abort(
    pauseless: bool, state: FsmState
) -> None:
    fsm, actions = fsm_in(state, pauseless=pauseless)
    deadline = fsm.commit_deadline_ms
    assert fsm.extend_build_time(S1, 100, 60, T0 + 2_000) == RESP_FAILED
    assert fsm.state is state
    assert fsm.commit_deadline_ms == deadline
    assert actions.calls == []


@BOTH
def test_extend_build_time_while_committing_fails(pauseless: bool) -> None:
    response, actions = while_committing(
        lambda fsm: fsm.extend_build_time(S1, 100, 60, T0 + 2_000), pauseless=pauseless
    )
    assert response == RESP_FAILED
    assert actions.aborts == 0


# --- whole protocol runs (§5.8) -------------------------------------------------------------------


def test_blocking_three_replicas_end_to_end() -> None:
    fsm, actions = make_fsm(replicas=3)
    assert fsm.segment_consumed(S1, 100, REASON_TIME_LIMIT, T0) == hold(100)
    assert fsm.segment_consumed(S2, 100, REASON_TIME_LIMIT, T0 + 200) == hold(100)
    assert fsm.segment_consumed(S3, 80, REASON_TIME_LIMIT, T0 + 400) == catch_up(100)
    assert fsm.segment_consumed(S3, 100, None, T0 + 1_000) == chosen_hold(100)
    assert fsm.winner == S1  # first of the tied replicas; S3 was not at the max
    assert fsm.segment_consumed(S1, 100, None, T0 + 3_000) == commit(100)
    assert fsm.segment_consumed(S2, 100, None, T0 + 3_100) == chosen_hold(100)
    assert fsm.segment_commit_start(S1, 100, T0 + 20_000) == RESP_COMMIT_CONTINUE
    assert fsm.segment_consumed(S2, 100, None, T0 + 21_000) == chosen_hold(100)
    assert fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 25_000) == RESP_COMMIT_SUCCESS
    assert fsm.segment_consumed(S2, 100, None, T0 + 26_000) == keep(100)
    assert fsm.segment_consumed(S3, 90, None, T0 + 26_000) == RESP_DISCARD
    assert actions.names == ["commit_metadata"]


def test_pauseless_two_replicas_end_to_end() -> None:
    fsm, actions = make_fsm(pauseless=True)
    assert fsm.segment_consumed(S1, 100, REASON_ROW_LIMIT, T0) == commit(100)
    assert fsm.segment_commit_start(S1, 100, T0 + 50) == RESP_COMMIT_CONTINUE
    assert fsm.segment_consumed(S2, 100, REASON_ROW_LIMIT, T0 + 100) == keep(100)
    assert fsm.extend_build_time(S1, 100, 200, T0 + 120_000) == RESP_PROCESSED
    assert fsm.segment_commit_end(S1, 100, "peer:///" + SEGMENT, METADATA, T0 + 300_000) == (
        RESP_COMMIT_SUCCESS
    )
    assert actions.names == ["commit_to_committing", "commit_to_done"]
    assert fsm.observed_commit_time_ms is None


def test_failing_abort_meter_does_not_escape() -> None:
    fsm, actions = fsm_in(FsmState.COMMITTER_UPLOADING)
    actions.raise_on.update({"commit_metadata", "aborted"})
    assert fsm.segment_commit_end(S1, 100, LOCATION, METADATA, T0 + 2_000) == RESP_FAILED
    assert fsm.state is FsmState.ABORTED


@BOTH
def test_a_first_report_at_the_streams_end_wins_at_once(pauseless: bool) -> None:
    fsm, _ = make_fsm(pauseless=pauseless)
    assert fsm.first_alone(S1) and fsm.first_alone(S2)
    assert fsm.segment_consumed(S1, 100, REASON_TIME_LIMIT, T0, at_stream_end=True) == commit(100)
    assert fsm.winner == S1 and not fsm.first_alone(S2)
    assert fsm.segment_consumed(S2, 100, None, T0 + 10) == chosen_hold(100)


def test_the_streams_end_decides_nothing_after_the_first_report() -> None:
    fsm, _ = make_fsm(replicas=3)
    assert fsm.segment_consumed(S1, 90, REASON_TIME_LIMIT, T0) == hold(90)
    assert not fsm.first_alone(S2) and fsm.first_alone(S1)  # S1 asking again: still alone
    # S2 at the end, but S1 reported first: the winner is picked as always, when all reported.
    assert fsm.segment_consumed(S2, 100, REASON_TIME_LIMIT, T0 + 5, at_stream_end=True) == hold(100)
    assert fsm.winner is None
