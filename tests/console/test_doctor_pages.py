"""The ingestion doctor on the partition page and the triage page, from mirror rows."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tables.domain.doctor import clock
from tables.models import HealingRun, MirroredTable
from tests.accounts import grant
from tests.console import mirror_factory as mf

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-test-password"
A, B = "Server_a_8001", "Server_b_8002"
CONSUMING = {A: "CONSUMING", B: "CONSUMING"}


@pytest.fixture
def viewer(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("vera", password=PASSWORD))
    return client


def _now_ms() -> int:
    return int(time.time() * 1000)


def _clock(ms: int) -> str:
    """As the doctor writes times (the date only on another day than today)."""
    return clock(ms, _now_ms())


def _html(resp) -> str:
    assert resp.status_code == 200
    return resp.content.decode()


def _doctor(html: str) -> str:
    found = re.search(r'<div id="doctor-region" data-live>(.*?)</section>', html, re.S)
    assert found, "no doctor on the page"
    return found.group(1)


def _stopped_after_step1(raw: str = "events", partition: int = 0, done_ago_ms: int = 60_000):
    """A partition whose controller stopped after commit step 1: its segment is DONE in ZooKeeper
    and still CONSUMING in the IdealState."""
    table = MirroredTable.objects.filter(raw_name=raw).first() or mf.table(raw)
    mf.segment(table, partition, 0, metadata_mtime_ms=_now_ms() - 3_600_000)
    mtime = _now_ms() - done_ago_ms
    mf.segment(
        table,
        partition,
        1,
        display_state="CONSUMING",
        status="DONE",
        end_offset="200",
        metadata_mtime_ms=mtime,
    )
    mf.partition(
        table,
        partition,
        "COMMITTING",
        replicas={A: mf.replica(phase="HOLDING"), B: mf.replica(phase="HOLDING")},
        verdict_detail="commit for 60 s",
    )
    return table, mtime


def test_the_partition_page_explains_a_controller_stopped_after_commit_step_1(viewer):
    mf.mirror_state()
    _table, mtime = _stopped_after_step1()
    html = _html(viewer.get("/ui/tables/events_REALTIME/partitions/0/"))
    doctor = _doctor(html)
    segment = mf.llc_name("events", 0, 1)
    assert 'data-diagnosis="commitStoppedAfterStep1" data-healthy="false"' in doctor
    assert f'data-due-ms="{mtime + 300_000}"' in doctor
    assert (
        f"<b>{segment} DONE at {_clock(mtime)} but still CONSUMING in the IdealState: the "
        "controller stopped between commit steps</b>"
    ) in doctor
    assert f"the healer will repair it at {_clock(mtime + 300_000)} (guard:" in doctor
    sources = re.findall(r'<li data-source="([^"]+)"', doctor)
    assert sources[:3] == ["ZooKeeper metadata", "IdealState", "ExternalView"]
    assert "server report" in sources and "healer" in sources
    assert f"{segment}: status DONE, offsets 100 to 200" in doctor
    assert f"{A}: HOLDING (CONSUMING) at offset 1000 of 1000" in doctor


def test_an_operator_gets_run_healer_now_and_a_viewer_does_not(client, django_user_model, settings):
    settings.HEALING_TRIGGER_FROM_MIRROR = True
    mf.mirror_state()
    _stopped_after_step1(done_ago_ms=400_000)  # past the guard: due now
    otto = django_user_model.objects.create_user("otto", password=PASSWORD)
    grant(otto, "operator")
    client.force_login(otto)
    html = _doctor(_html(client.get("/ui/tables/events_REALTIME/partitions/0/")))
    form = re.search(r'<form method="post" action="([^"]+)"[^>]*id="doctor-heal-form">', html)
    assert form and form.group(1) == "/ui/tables/events_REALTIME/heal/"
    assert "csrfmiddlewaretoken" in html and 'id="doctor-heal-button"' in html
    assert "within seconds" in html

    client.force_login(django_user_model.objects.create_user("vera", password=PASSWORD))
    seen = _doctor(_html(client.get("/ui/tables/events_REALTIME/partitions/0/")))
    assert "doctor-heal-form" not in seen
    assert "Run healer now (an operator can)" in seen


def test_a_healthy_partition_reads_consuming_normally(viewer):
    mf.mirror_state()
    events = mf.table("events")
    mf.segment(events, 0, 0)
    mf.segment(events, 0, 1, display_state="CONSUMING", metadata_mtime_ms=_now_ms())
    mf.partition(events, 0, verdict_detail="12.5 rows/s, 0 records behind")
    doctor = _doctor(_html(viewer.get("/ui/tables/events_REALTIME/partitions/0/")))
    assert 'data-diagnosis="healthy" data-healthy="true"' in doctor
    assert "<b>consuming normally: 12.5 rows/s, 0 records behind</b>" in doctor
    assert "doctor-heal-form" not in doctor and "Fix:" not in doctor


def test_the_guard_is_the_clusters_mirrored_completion_time(viewer):
    mf.mirror_state(max_completion_ms=60_000)
    _table, mtime = _stopped_after_step1(done_ago_ms=30_000)
    doctor = _doctor(_html(viewer.get("/ui/tables/events_REALTIME/partitions/0/")))
    assert f'data-due-ms="{mtime + 60_000}"' in doctor
    assert "max.segment.completion.time.millis 1 min 00 s" in doctor


def test_the_doctor_names_the_servers_reason_and_the_last_healing_run(viewer, settings):
    settings.REALTIME_SEGMENT_VALIDATION_FREQUENCY_SECONDS = 300
    mf.mirror_state()
    events = mf.table("events", stream_partitions=1)
    mf.segment(
        events,
        0,
        0,
        display_state="OFFLINE",
        status="IN_PROGRESS",
        all_offline=True,
        ideal_states={A: "OFFLINE", B: "OFFLINE"},
        external_states={A: "OFFLINE", B: "OFFLINE"},
        metadata_mtime_ms=_now_ms() - 600_000,
    )
    mf.instance(A)
    mf.instance(B)
    reason = "topicNotFound: topic 'events-topic' does not exist"
    mf.partition(
        events,
        0,
        "MISSING_CONSUMING_SEGMENT",
        consuming_segment="",
        latest_segment=mf.llc_name("events", 0, 0),
        replicas={
            A: mf.replica(
                "OFFLINE", phase="ERROR", consumerState="NOT_CONSUMING", stoppedReason=reason
            ),
            B: {"state": "OFFLINE"},
        },
    )
    started = datetime.now(UTC).replace(microsecond=0)
    HealingRun.objects.create(
        table="events_REALTIME",
        run_id="schedule-1",
        trigger="schedule",
        started_at=started,
        finished_at=started,
    )
    doctor = _doctor(_html(viewer.get("/ui/tables/events_REALTIME/partitions/0/")))
    assert 'data-diagnosis="allReplicasOffline"' in doctor
    assert f"the servers stopped consuming ({A}: {reason})" in unescape(doctor)
    assert f"{B}: no recent live state" in doctor
    started_ms = int(started.timestamp() * 1000)
    assert f'last run on this table</span> <time data-ms="{started_ms}">{_clock(started_ms)}' in (
        doctor
    )
    following = started_ms + 300_000
    assert f'next scheduled run</span> <time data-ms="{following}">{_clock(following)}' in doctor


def test_a_new_stream_partition_is_explained(viewer):
    mf.mirror_state()
    events = mf.table("events", stream_partitions=2)
    mf.segment(events, 0, 0, display_state="CONSUMING", metadata_mtime_ms=_now_ms())
    mf.partition(events, 0)
    mf.partition(
        events, 1, "MISSING_CONSUMING_SEGMENT", consuming_segment="", latest_segment="", replicas={}
    )
    doctor = _doctor(_html(viewer.get("/ui/tables/events_REALTIME/partitions/1/")))
    assert "stream partition 1 has no segment yet (the stream has 2 partitions)" in doctor
    assert "a first segment starts at the stream's earliest offset" in unescape(doctor)


# --- the triage page ----------------------------------------------------------------------------


def test_the_triage_page_shows_the_doctor_for_every_partition_that_is_not_healthy(viewer):
    mf.mirror_state()
    _stopped_after_step1(partition=0)
    events = MirroredTable.objects.get(name="events_REALTIME")
    mf.segment(events, 1, 0, display_state="CONSUMING", metadata_mtime_ms=_now_ms())
    mf.partition(events, 1)
    html = _html(viewer.get("/"))
    rows = dict(
        re.findall(r'<tr data-table="events_REALTIME" data-partition="(\d)"(.*?)</tr>', html, re.S)
    )
    assert 'data-diagnosis="commitStoppedAfterStep1"' in rows["0"]
    assert "the controller stopped between commit steps" in rows["0"]
    assert "Fix:</span> the healer acts at" in rows["0"]
    assert "data-diagnosis" not in rows["1"]  # consuming normally: no doctor line


def _query_counts(client, paths) -> list[int]:
    counts = []
    for path in paths:
        with CaptureQueriesContext(connection) as queries:
            _html(client.get(path))
        counts.append(len(queries))
    return counts


def test_the_doctor_costs_a_fixed_number_of_queries(viewer):
    mf.mirror_state()
    paths = ["/", "/ui/tables/t0000_REALTIME/partitions/0/"]
    for n in range(2):
        _stopped_after_step1(f"t{n:04d}", 0)
    small = _query_counts(viewer, paths)
    for n in range(2, 12):
        for p in range(3):
            _stopped_after_step1(f"t{n:04d}", p)
    big = _query_counts(viewer, paths)
    assert big == small
    html = _html(viewer.get("/"))
    assert html.count('data-diagnosis="commitStoppedAfterStep1"') == 32
