"""The build back-off policy (tables.domain.build_backoff): classification, fingerprint, delays,
records and holds. Pure: no I/O, `now` given."""

from __future__ import annotations

import pytest

from tables.domain.build_backoff import (
    DETERMINISTIC_FAULT,
    ERROR_CHARS,
    BackoffPolicy,
    FailureKind,
    after_failure,
    classify,
    fingerprint,
    hold,
)

D, T = FailureKind.DETERMINISTIC, FailureKind.TRANSIENT
POLICY = BackoffPolicy(first_s=60, cap_s=3600)


@pytest.mark.parametrize(
    ("type_name", "message", "kind"),
    [
        ("BuildError", "cannot build s: unknown column 'x'", D),
        ("BuildError", "unsupported date-time pattern 'yyyyb': ...", D),
        ("BuildError", "the Spark job failed: AnalysisException: [UNRESOLVED_COLUMN] x", D),
        ("BuildError", "the Spark job failed: PythonException: division by zero", D),
        ("BuildError", "the Spark job failed: SparkUpgradeException: Fail to parse", D),
        ("BuildError", "the Spark job failed: Py4JNetworkError: Answer from Java side is empty", T),
        ("BuildError", "the Spark job failed: SparkException: Job aborted", T),
        ("BuildError", "the staged rows file:///x do not exist", T),
        ("BuildError", "fault injection: spark.s.build_fails", T),
        ("BuildError", f"{DETERMINISTIC_FAULT}: spark.s.build_rejects", D),
        ("tables.segments.errors.BuildError", "cannot build s: bad", D),
        # a Job row's error handed back as BuildError("<Type>: <message>")
        ("BuildError", "BuildError: cannot build s: bad", D),
        ("BuildError", "OSError: [Errno 28] No space left on device", T),
        ("BuildError", "BuildError: fault injection: spark.build_fails", T),
        ("AnalysisException", "cannot resolve", D),
        ("WorkerLostError", "Worker exited prematurely: signal 9 (SIGKILL).", T),
        ("TimeLimitExceeded", "600", T),
        ("TaskRevokedError", "revoked", T),
        ("ConnectionError", "Error 111 connecting to redis", T),
        ("OSError", "deep store unreachable", T),
        ("KeyError", "'x'", T),
    ],
)
def test_classify(type_name: str, message: str, kind: FailureKind) -> None:
    assert classify(type_name, message) is kind


def test_fingerprint_changes_with_either_document_only() -> None:
    config, schema = {"tableName": "t", "a": [1, 2]}, {"schemaName": "t", "fields": []}
    same = fingerprint({"a": [1, 2], "tableName": "t"}, {"fields": [], "schemaName": "t"})
    assert fingerprint(config, schema) == same
    assert len(same) == 16
    assert fingerprint({**config, "a": [2, 1]}, schema) != same
    assert fingerprint(config, {**schema, "fields": [{"name": "x"}]}) != same


def test_delays_double_up_to_the_cap() -> None:
    assert [POLICY.delay_s(n) for n in range(1, 9)] == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert POLICY.delay_s(10_000) == 3600
    assert BackoffPolicy(first_s=10, cap_s=5).delay_s(3) == 10  # the first wait is never cut


def test_failures_count_under_one_fingerprint_and_restart_under_another() -> None:
    first = after_failure(
        None, now_ms=1_000, fingerprint="a", error="E1", server="S1", policy=POLICY
    )
    assert (first.failures, first.first_failure_ms, first.next_retry_ms) == (1, 1_000, 61_000)
    second = after_failure(
        first, now_ms=70_000, fingerprint="a", error="E2", server="S2", policy=POLICY
    )
    assert (second.failures, second.first_failure_ms) == (2, 1_000)
    assert (second.next_retry_ms, second.error, second.servers) == (190_000, "E2", ("S1", "S2"))
    again = after_failure(
        second, now_ms=200_000, fingerprint="a", error="E3", server="S1", policy=POLICY
    )
    assert again.servers == ("S1", "S2") and again.failures == 3
    fixed = after_failure(
        again, now_ms=300_000, fingerprint="b", error="E4", server="S2", policy=POLICY
    )
    assert (fixed.failures, fixed.first_failure_ms, fixed.servers) == (1, 300_000, ("S2",))
    assert fixed.next_retry_ms == 360_000


def test_errors_are_trimmed() -> None:
    record = after_failure(
        None, now_ms=0, fingerprint="a", error="x" * 10_000, server="", policy=POLICY
    )
    assert len(record.error) == ERROR_CHARS and record.servers == ()


def test_hold_until_the_back_off_ends_unless_the_config_changed() -> None:
    record = after_failure(
        None,
        now_ms=0,
        fingerprint="a",
        error="BuildError: bad pattern\nmore detail",
        server="S",
        policy=POLICY,
    )
    held = hold(record, now_ms=59_999, fingerprint="a")
    assert held is not None and held.until_ms == 60_000
    assert (
        held.reason == "build failed: BuildError: bad pattern; next try at 1970-01-01 00:01:00 UTC"
    )
    assert hold(record, now_ms=60_000, fingerprint="a") is None  # the back-off is over
    assert hold(record, now_ms=1, fingerprint="b") is None  # a config fix: at once
    assert hold(record, now_ms=1, fingerprint=None) is not None  # config unreadable: still held
    assert hold(None, now_ms=1, fingerprint="a") is None  # cleared
