"""Segments not in the deep store yet and what the healer does next about them
(tables.domain.doctor_facts: missing_download_url, committing_repair_allowed, deep_store_step;
round 2 §A.6, §B.4, §B.5, §C.4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tables.domain.doctor_facts import (
    HealerTiming,
    SegmentView,
    StoreStep,
    committing_repair_allowed,
    deep_store_step,
    missing_download_url,
)

NOW = 1_714_563_100_000  # 2024-05-01 11:31:40 UTC
GUARD_MS = 300_000
TIMING = HealerTiming(now_ms=NOW, max_completion_ms=GUARD_MS, mirror_triggers=True)
SEG = "t__0__4__20240501T1125Z"
ONLINE2 = {"S1": "ONLINE", "S2": "ONLINE"}


def segment(status: str = "COMMITTING", age_ms: int = 40_000, **kwargs) -> SegmentView:
    base = {
        "name": SEG,
        "status": status,
        "start_offset": "400",
        "end_offset": "500",
        "mtime_ms": NOW - age_ms,
        "ideal": ONLINE2,
        "external": ONLINE2,
    }
    return SegmentView(**{**base, **kwargs})


def step(view: SegmentView, pauseless: bool = True, allowed: bool = True, timing=TIMING):
    return deep_store_step(view, pauseless=pauseless, repair_allowed=allowed, timing=timing)


@pytest.mark.parametrize(
    ("status", "url", "missing"),
    [
        ("COMMITTING", "", True),
        ("DONE", "", True),
        ("DONE", None, True),
        ("DONE", "file:///deep/t/seg", False),
        ("IN_PROGRESS", "", False),
        ("UPLOADED", "", False),
    ],
)
def test_missing_download_url_is_committing_or_done_without_url(status, url, missing):
    assert missing_download_url(status, url) is missing


@pytest.mark.parametrize(
    ("config", "allowed"),
    [
        ({}, True),
        ({"upsertConfig": {"mode": "FULL"}}, True),  # full upsert is not blocked (Pinot)
        ({"upsertConfig": {"mode": "PARTIAL"}}, False),
        ({"upsertConfig": {"mode": "partial"}}, False),
        ({"dedupConfig": {"dedupEnabled": True}}, False),
        ({"dedupConfig": {"dedupEnabled": "true"}}, False),
        ({"dedupConfig": {"dedupEnabled": False}}, True),
        (
            {
                "upsertConfig": {"mode": "PARTIAL"},
                "ingestionConfig": {"streamIngestionConfig": {"disasterRecoveryMode": "ALWAYS"}},
            },
            True,
        ),
        (
            {
                "dedupConfig": {"dedupEnabled": True},
                "ingestionConfig": {"streamIngestionConfig": {"disasterRecoveryMode": "DEFAULT"}},
            },
            False,
        ),
    ],
)
def test_committing_repair_is_allowed_as_pinot_decides(config, allowed):
    assert committing_repair_allowed(config) is allowed


def test_a_commit_within_the_guard_waits_until_the_guard_ends():
    found = step(segment(age_ms=40_000))
    assert found.step is StoreStep.WAIT_COMMIT
    assert found.due_ms == NOW - 40_000 + GUARD_MS
    assert found.text.startswith("waits until 11:36:00 UTC: the commit may still end")
    assert found.when.startswith("at 11:36:00 UTC (guard: max.segment.completion.time.millis")


def test_past_the_guard_a_server_with_an_online_replica_uploads_its_copy():
    found = step(segment(age_ms=GUARD_MS + 1, external={"S1": "ONLINE", "S2": "OFFLINE"}))
    assert found.step is StoreStep.UPLOAD
    assert found.text.startswith("ask S1 (picked at random) to upload its copy")
    assert "uploadCommittedSegment" in found.text
    assert found.due_ms == NOW


def test_an_upload_waits_for_the_next_scheduled_run_as_the_mirror_requests_none():
    """The mirror requests healer runs for consuming repairs and ERROR resets, not uploads."""
    timing = replace(TIMING, next_run_ms=NOW + 60_000)
    found = step(segment(age_ms=GUARD_MS + 1), timing=timing)
    assert found.when == "on its next scheduled run at 11:32:40 UTC"
    assert step(segment(age_ms=GUARD_MS + 1)).when == "on its next run"
    reingest = step(segment(external={"S1": "ERROR", "S2": "ERROR"}), timing=timing)
    assert reingest.when.startswith("on its next run, within seconds")


def test_every_replica_in_error_is_reingested_at_once_without_the_guard():
    found = step(segment(age_ms=1000, external={"S1": "ERROR", "S2": "ERROR"}))
    assert found.step is StoreStep.REINGEST
    assert found.text.startswith("re-ingest offsets [400, 500) from the stream")
    assert found.due_ms == NOW
    assert found.automatic


def test_partial_upsert_or_dedup_in_default_mode_is_unrecoverable():
    found = step(segment(external={"S1": "ERROR", "S2": "ERROR"}), allowed=False)
    assert found.step is StoreStep.UNRECOVERABLE
    assert found.text.startswith("unrecoverable in DEFAULT mode")
    assert not found.automatic and found.when == ""


def test_with_automatic_reset_off_the_reingestion_is_for_an_operator():
    timing = replace(TIMING, error_auto_reset=False)
    found = step(segment(external={"S1": "ERROR", "S2": "ERROR"}), timing=timing)
    assert found.step is StoreStep.NOT_AUTOMATIC
    assert not found.automatic


def test_a_controller_stopped_after_commit_start_gets_the_consuming_repair():
    consuming = {"S1": "CONSUMING", "S2": "CONSUMING"}
    found = step(segment(age_ms=GUARD_MS + 1, ideal=consuming, external=consuming))
    assert found.step is StoreStep.CONSUMING_REPAIR
    assert found.text.endswith("a new segment starts at its end offset 500")
    early = step(segment(age_ms=1000, ideal=consuming, external=consuming))
    assert early.step is StoreStep.WAIT_COMMIT


def test_some_replicas_in_error_and_none_online_are_reset():
    found = step(segment(age_ms=GUARD_MS + 1, external={"S1": "ERROR", "S2": "OFFLINE"}))
    assert found.step is StoreStep.RESET
    assert found.text.startswith("reset S1")


def test_no_replica_online_leaves_the_upload_waiting():
    found = step(segment(age_ms=GUARD_MS + 1, external={"S1": "OFFLINE", "S2": "OFFLINE"}))
    assert found.step is StoreStep.NO_SOURCE
    assert not found.automatic


def test_a_peer_download_commit_is_uploaded_from_a_server_that_has_it():
    """DONE with an empty URL: after the guard in a pauseless table, at once otherwise (Pinot's
    non-pauseless rule has no guard)."""
    done = segment(status="DONE", age_ms=1000, external={"S1": "OFFLINE", "S2": "ONLINE"})
    assert step(done).step is StoreStep.WAIT_COMMIT
    found = step(done, pauseless=False)
    assert found.step is StoreStep.UPLOAD
    assert found.text.startswith("ask S2 (picked at random)")


def test_a_done_segment_with_every_replica_in_error_is_reset_not_reingested():
    done = segment(status="DONE", age_ms=GUARD_MS + 1, external={"S1": "ERROR", "S2": "ERROR"})
    assert step(done, allowed=False).step is StoreStep.RESET
