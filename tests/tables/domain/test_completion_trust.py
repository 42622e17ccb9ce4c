"""Whom the lead controller believes in the completion protocol: the pure decision."""

from __future__ import annotations

import pytest

from tables.domain.completion_trust import (
    Cause,
    Refusal,
    check_caller,
    check_token,
    refusal_counter_name,
)

TOKEN = "s3cret-token"
ME = "Server_127.0.0.1_7001"
SEGMENT = "githubEvents__0__3__20240501T1030Z"


def _caller(**overrides: object) -> Refusal | None:
    facts: dict = {
        "live": True,
        "replicas": {ME: "CONSUMING", "Server_127.0.0.1_7002": "CONSUMING"},
        "latest_offset": 1000,
    }
    facts |= overrides
    return check_caller(ME, SEGMENT, int(facts.pop("offset", 900)), **facts)


def test_the_right_bearer_token_passes_in_any_case_of_the_scheme():
    assert check_token(f"Bearer {TOKEN}", TOKEN) is None
    assert check_token(f"bearer {TOKEN}", TOKEN) is None
    assert check_token(f"  Bearer   {TOKEN}  ", TOKEN) is None


@pytest.mark.parametrize("header", [None, ""])
def test_no_header_is_no_token(header):
    refusal = check_token(header, TOKEN)
    assert refusal is not None
    assert (refusal.cause, refusal.http_status) == (Cause.NO_TOKEN, 401)


@pytest.mark.parametrize(
    "header",
    [
        "Bearer wrong",
        f"Bearer {TOKEN}x",
        f"Token {TOKEN}",
        "Basic dXNlcjpwdw==",
        "Bearer",
        f"Bearer {TOKEN} extra",
        "Bearer \x00",
    ],
)
def test_another_token_scheme_or_shape_is_a_bad_token(header):
    refusal = check_token(header, TOKEN)
    assert refusal is not None
    assert (refusal.cause, refusal.http_status) == (Cause.BAD_TOKEN, 401)
    assert TOKEN not in refusal.reason


def test_an_empty_expected_token_admits_nobody():
    refusal = check_token("Bearer ", "")
    assert refusal is not None and refusal.cause is Cause.BAD_TOKEN


def test_a_live_replica_within_the_stream_is_believed():
    assert _caller() is None
    assert _caller(offset=1000) is None  # the latest offset itself: the next one to be produced


def test_a_replica_in_any_state_is_a_replica():
    assert _caller(replicas={ME: "OFFLINE"}) is None
    assert _caller(replicas={ME: "ONLINE"}) is None


def test_an_instance_that_is_not_live_is_refused_first():
    refusal = _caller(live=False, replicas={}, offset=10**12)
    assert refusal is not None
    assert (refusal.cause, refusal.http_status) == (Cause.NOT_LIVE, 403)
    assert ME in refusal.reason


def test_a_live_instance_without_a_replica_is_refused():
    refusal = _caller(replicas={"Server_127.0.0.1_7002": "CONSUMING"}, offset=10**12)
    assert refusal is not None
    assert (refusal.cause, refusal.http_status) == (Cause.NOT_REPLICA, 403)
    assert SEGMENT in refusal.reason
    missing = _caller(replicas={})  # the IdealState has no such segment
    assert missing is not None and missing.cause is Cause.NOT_REPLICA


def test_an_offset_past_the_latest_is_refused():
    refusal = _caller(offset=1001)
    assert refusal is not None
    assert (refusal.cause, refusal.http_status) == (Cause.OFFSET_PAST_END, 400)
    assert "1001" in refusal.reason and "1000" in refusal.reason


def test_an_unknown_latest_offset_skips_the_offset_rule():
    assert _caller(latest_offset=None, offset=10**12) is None


def test_every_cause_has_a_status_and_its_own_counter():
    assert {c: Refusal(c, "x").http_status for c in Cause} == {
        Cause.NO_TOKEN: 401,
        Cause.BAD_TOKEN: 401,
        Cause.NOT_LIVE: 403,
        Cause.NOT_REPLICA: 403,
        Cause.OFFSET_PAST_END: 400,
    }
    names = {refusal_counter_name(c) for c in Cause}
    assert len(names) == len(Cause)
    assert all(len(name) <= 64 for name in names)  # DurableCounter.name
    assert refusal_counter_name(Cause.NOT_REPLICA) == "llcCompletionCallsRefused.notReplica"
