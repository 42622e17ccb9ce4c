"""The table page's "Committing / missing download URL" section, from mirror rows
(console.pages.queries.deep_store_rows, tables.domain.doctor_facts.deep_store_step).

Each segment that is COMMITTING, or DONE with an empty download URL, is listed with its status,
since when, its replicas' ExternalView states, and what the healer does next and when.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.console import mirror_factory as mf

pytestmark = pytest.mark.django_db

TABLE = "pl_REALTIME"
GUARD_MS = 300_000
ALL_ERROR = {"Server_a_8001": "ERROR", "Server_b_8002": "ERROR"}
ONLINE_OFFLINE = {"Server_a_8001": "ONLINE", "Server_b_8002": "OFFLINE"}


@pytest.fixture
def viewer(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("vera", password="a-long-password"))
    return client


def _page(client, table: str) -> str:
    resp = client.get(f"/ui/tables/{table}/")
    assert resp.status_code == 200
    return resp.content.decode()


def _now_ms() -> int:
    return int(timezone.now().timestamp() * 1000)


def _section(html: str) -> str:
    found = re.search(r'<div id="deep-store-region" data-live>(.*?)</div>', html, re.S)
    assert found, "no Committing / missing download URL section"
    return found.group(1)


def _rows(html: str) -> dict[str, dict[str, str]]:
    """segment -> {status, step, next-step, when, since, ev} of the section's rows."""
    out = {}
    for row in re.findall(r"<tr data-segment=.*?</tr>", _section(html), re.S):
        attrs = dict(re.findall(r'data-(segment|status|step)="([^"]*)"', row))
        fields = dict(re.findall(r'data-field="([\w-]+)">(.*?)</td>', row, re.S))
        states = re.findall(r'data-server="([^"]+)" data-ev-state="([^"]*)"', row)
        out[attrs["segment"]] = {**attrs, **fields, "ev": dict(states)}
    return out


def _segment(owner, sequence: int, status: str, age_ms: int, ev: dict[str, str], url: str = ""):
    ideal = {server: "ONLINE" for server in ev}
    return mf.segment(
        owner,
        0,
        sequence,
        status=status,
        download_url=url,
        ideal_states=ideal,
        external_states=ev,
        display_state="ERROR" if "ERROR" in ev.values() else "ONLINE",
        has_error="ERROR" in ev.values(),
        metadata_mtime_ms=_now_ms() - age_ms,
        start_offset=str(sequence * 100),
        end_offset=str(sequence * 100 + 100),
    )


@pytest.fixture
def pauseless_table():
    mf.mirror_state(max_completion_ms=GUARD_MS)
    owner = mf.table("pl", pauseless=True)
    online = {"Server_a_8001": "ONLINE", "Server_b_8002": "ONLINE"}
    _segment(owner, 1, "DONE", 3_600_000, online, url="file:///deep/pl/1")  # in the deep store
    _segment(owner, 2, "DONE", 900_000, ONLINE_OFFLINE)  # a peer-download commit
    _segment(owner, 3, "COMMITTING", 1_200_000, ALL_ERROR)  # no server has it
    _segment(owner, 4, "COMMITTING", GUARD_MS + 60_000, ONLINE_OFFLINE)  # past the guard
    _segment(owner, 5, "COMMITTING", 40_000, online)  # a commit running
    mf.segment(owner, 0, 6, display_state="CONSUMING")
    return owner


def test_each_segment_says_its_state_replicas_and_the_healers_next_step(viewer, pauseless_table):
    html = viewer.get(f"/ui/tables/{TABLE}/").content.decode()

    rows = _rows(html)
    name = "pl__0__{}__20231114T2213Z".format
    assert list(rows) == [name(2), name(3), name(4), name(5)]  # partition, sequence order

    done = rows[name(2)]
    assert (done["status"], done["step"]) == ("DONE", "uploadCommittedSegment")
    assert done["ev"] == ONLINE_OFFLINE
    assert done["next-step"].startswith("ask Server_a_8001 (picked at random) to upload its copy")
    assert "(15 min 00 s ago)" in done["since"]

    lost = rows[name(3)]
    assert (lost["status"], lost["step"]) == ("COMMITTING", "reingest")
    assert lost["ev"] == ALL_ERROR
    assert lost["next-step"].startswith("re-ingest offsets [300, 400) from the stream")

    past = rows[name(4)]
    assert past["step"] == "uploadCommittedSegment"
    assert past["next-step"].startswith("ask Server_a_8001")

    running = rows[name(5)]
    assert running["step"] == "waitCommit"
    until = dt.datetime.fromtimestamp((_now_ms() - 40_000 + GUARD_MS) / 1000, dt.UTC)
    expected = {until.strftime("%H:%M:%S"), (until - dt.timedelta(seconds=1)).strftime("%H:%M:%S")}
    shown = re.match(r"waits until (\d\d:\d\d:\d\d) UTC", running["next-step"])
    assert shown and shown.group(1) in expected
    assert "guard: max.segment.completion.time.millis 5 min 00 s" in running["when"]
    assert "The healer&#x27;s next step" in html or "The healer's next step" in html


def test_partial_upsert_in_default_mode_is_shown_unrecoverable(viewer):
    mf.mirror_state()
    owner = mf.table("pu", pauseless=True, config={"upsertConfig": {"mode": "PARTIAL"}})
    _segment(owner, 3, "COMMITTING", 1_200_000, ALL_ERROR)
    html = viewer.get("/ui/tables/pu_REALTIME/").content.decode()
    (row,) = _rows(html).values()
    assert row["step"] == "unrecoverable"
    assert row["next-step"].startswith("unrecoverable in DEFAULT mode")
    assert row["when"] == "no automatic step"


def test_the_section_is_for_pauseless_tables_or_tables_with_such_segments(viewer):
    mf.mirror_state()
    quiet = mf.table("quiet", pauseless=True)
    mf.segment(quiet, 0, 1)  # DONE with its URL
    html = viewer.get("/ui/tables/quiet_REALTIME/").content.decode()
    assert "None: every committed segment has its deep-store copy." in _section(html)

    classic = mf.table("classic")
    mf.segment(classic, 0, 1)
    assert (
        'id="deep-store-region"' not in viewer.get("/ui/tables/classic_REALTIME/").content.decode()
    )
    _segment(classic, 2, "DONE", 60_000, ONLINE_OFFLINE)  # peer download without pauseless
    (row,) = _rows(viewer.get("/ui/tables/classic_REALTIME/").content.decode()).values()
    assert row["step"] == "uploadCommittedSegment"  # no guard outside pauseless


def test_the_section_costs_a_fixed_number_of_queries(viewer, pauseless_table):
    """Its segments (one query) and, only when it lists any, the table's healing runs and the
    cluster's guard: the same whatever their number."""
    with CaptureQueriesContext(connection) as few:
        assert len(_rows(_page(viewer, TABLE))) == 4
    for sequence in range(7, 40):
        _segment(pauseless_table, sequence, "COMMITTING", 40_000, ALL_ERROR)
    with CaptureQueriesContext(connection) as many:
        assert len(_rows(_page(viewer, TABLE))) == 4 + 33
    # 18: the Re-ingest requests (console.pages.reingest), the active alerts (console.alerting)
    assert len(few) == len(many) <= 18
    pauseless_table.segments.exclude(status="IN_PROGRESS").update(download_url="file:///x")
    pauseless_table.segments.filter(status="COMMITTING").update(status="DONE")
    with CaptureQueriesContext(connection) as none:
        assert _rows(_page(viewer, TABLE)) == {}
    assert len(none) == len(many) - 2
