"""The console's pages, rendered by Django's test client from mirror rows made in the database.

No ZooKeeper, Redis or worker: the pages read the mirror only, and one test proves it by making
every ZooKeeper connection fail.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tables.models import MirroredTable
from tests.accounts import grant
from tests.console import mirror_factory as mf

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-test-password"


@pytest.fixture
def viewer(client, django_user_model):
    user = django_user_model.objects.create_user("vera", password=PASSWORD)
    client.force_login(user)
    return client


@pytest.fixture
def operator(client, django_user_model):
    user = django_user_model.objects.create_user("otto", password=PASSWORD)
    grant(user, "operator")
    client.force_login(user)
    return client


def _rows(html: str, attribute: str) -> list[str]:
    """The values of `attribute` on the <tr> elements of `html`, in order."""
    return re.findall(rf'<tr [^>]*?{attribute}="([^"]*)"', html)


def _text(resp) -> str:
    return resp.content.decode()


# --- overview -----------------------------------------------------------------------------------


def test_it_redirects_anonymous_visitors_to_the_login_page(client):
    resp = client.get("/")
    assert resp.status_code == 302
    assert resp["Location"].startswith("/login/")


def test_the_overview_lists_every_partition_worst_first(viewer):
    mf.mirror_state()
    good, bad = mf.table("good"), mf.table("bad", health="BAD")
    mf.partition(good, 0, records_lag=5)
    mf.partition(good, 1, "LAGGING", records_lag=50_000, time_lag_ms=90_000)
    mf.partition(bad, 0, "STALLED", records_lag=10, stalled_s=300)
    mf.partition(bad, 1, "STALLED", records_lag=900, stalled_s=120)
    mf.partition(bad, 2, "MISSING_CONSUMING_SEGMENT", consuming_segment="", replicas={})

    html = _text(viewer.get("/"))

    order = re.findall(r'<tr data-table="(\w+)" data-partition="(\d+)" data-verdict="(\w+)"', html)
    assert order == [
        ("bad_REALTIME", "1", "STALLED"),
        ("bad_REALTIME", "0", "STALLED"),
        ("bad_REALTIME", "2", "MISSING_CONSUMING_SEGMENT"),
        ("good_REALTIME", "1", "LAGGING"),
        ("good_REALTIME", "0", "CONSUMING"),
    ]
    assert "No CONSUMING segment" in html
    assert 'href="/ui/tables/bad_REALTIME/partitions/1/"' in html
    assert 'data-records-lag="50000">50,000<' in html


def test_the_overview_counts_errors_paused_tables_and_live_instances(viewer):
    mf.mirror_state()
    mf.table("a", error_segments=3, missing_download_url=2, paused=True)
    mf.table("b", error_segments=1)
    mf.instance("Server_1", live=True)
    mf.instance("Server_2", live=False)
    mf.instance("Controller_1", kind="CONTROLLER", live=True)

    html = _text(viewer.get("/"))

    def counter(name: str) -> str:
        return re.search(rf'data-counter="{name}"[^>]*>.*?<dd>(\d+)', html, re.S).group(1)

    assert counter("error_segments") == "4"
    assert counter("segments_missing_download_url") == "2"
    assert counter("paused_tables") == "1"
    assert counter("live_servers") == "1"
    assert counter("live_controllers") == "1"


def test_the_overview_filters_by_verdict_and_table_and_pages(viewer):
    mf.mirror_state()
    alpha, beta = mf.table("alpha"), mf.table("beta")
    for number in range(5):
        mf.partition(alpha, number, "LAGGING", records_lag=100 - number)
    mf.partition(beta, 0, "STALLED")

    lagging = _text(viewer.get("/?verdict=LAGGING"))
    assert _rows(lagging, "data-verdict") == ["LAGGING"] * 5
    assert _rows(_text(viewer.get("/?table=bet")), "data-table") == ["beta_REALTIME"]

    second = _text(viewer.get("/?verdict=LAGGING&per_page=2&page=2"))
    assert _rows(second, "data-partition") == ["2", "3"]
    assert 'data-page-number="2" data-num-pages="3" data-total="5"' in second
    assert 'href="?verdict=LAGGING&amp;page=3"' in second


def test_a_paused_partition_says_who_paused_it_when_and_why(viewer):
    mf.mirror_state()
    paused = mf.table(
        "p",
        paused=True,
        pause_reason="ADMINISTRATIVE",
        pause_comment="kafka maintenance",
        pause_time="1700000000000",
        health="PAUSED",
    )
    mf.partition(paused, 0, "PAUSED", verdict_detail="paused")
    mf.audit("alice", "pause", "p_REALTIME", reason="kafka maintenance")

    html = _text(viewer.get("/"))

    assert (
        "paused by alice since 2023-11-14 22:13:20 UTC (ADMINISTRATIVE): kafka maintenance" in html
    )


# --- mirror staleness ---------------------------------------------------------------------------


def test_every_page_says_how_old_the_mirror_is(viewer, settings):
    settings.MIRROR_SYNC_SECONDS = 5
    mf.mirror_state(age_s=3)
    html = _text(viewer.get("/ui/tables/"))
    assert re.search(
        r'id="mirror-status" data-live role="status" class="mirror"\s+data-stale="false"', html
    )
    assert "mirror synced <b>3 s</b> ago" in html

    mf.mirror_state(age_s=60, error="ConnectionLoss")
    html = _text(viewer.get("/ui/tables/"))
    assert 'data-stale="true"' in html
    assert "stale: older than 15 s" in html
    assert "last sync failed: ConnectionLoss" in html


def test_a_mirror_that_never_synced_is_called_out(viewer):
    html = _text(viewer.get("/"))
    assert "has never synced" in html
    assert 'data-stale="true"' in html


# --- tables list -------------------------------------------------------------------------------


def _table_fixture():
    mf.mirror_state()
    mf.table("orders", health="BAD", max_records_lag=10, segment_count=30, error_segments=2)
    mf.table("clicks", health="GOOD", max_records_lag=500, segment_count=10, tenant="web")
    mf.table("views", health="WARNING", max_records_lag=50, segment_count=20, paused=True)
    mf.table("batch", "OFFLINE", health="GOOD", segment_count=5)


def test_the_tables_list_sorts_on_the_server(viewer):
    _table_fixture()

    def order(query: str) -> list[str]:
        return _rows(_text(viewer.get("/ui/tables/" + query)), "data-table")

    assert order("") == ["orders_REALTIME", "views_REALTIME", "batch_OFFLINE", "clicks_REALTIME"]
    assert order("?sort=name") == [
        "batch_OFFLINE",
        "clicks_REALTIME",
        "orders_REALTIME",
        "views_REALTIME",
    ]
    assert order("?sort=-name")[0] == "views_REALTIME"
    assert order("?sort=-lag")[:3] == ["clicks_REALTIME", "views_REALTIME", "orders_REALTIME"]
    assert order("?sort=-segments")[0] == "orders_REALTIME"
    assert order("?sort=-errors")[0] == "orders_REALTIME"
    assert order("?sort=bogus") == order("")


def test_the_tables_list_filters_on_the_server(viewer):
    _table_fixture()

    def names(query: str) -> list[str]:
        return _rows(_text(viewer.get("/ui/tables/" + query)), "data-table")

    assert names("?q=ORD") == ["orders_REALTIME"]
    assert names("?health=WARNING") == ["views_REALTIME"]
    assert names("?tenant=web") == ["clicks_REALTIME"]
    assert names("?paused=yes") == ["views_REALTIME"]
    assert sorted(names("?type=OFFLINE")) == ["batch_OFFLINE"]
    assert names("?q=nothing-like-this") == []


def test_the_sort_links_keep_the_filters_and_mark_the_current_column(viewer):
    _table_fixture()
    html = _text(viewer.get("/ui/tables/?q=o&sort=-lag"))
    assert 'aria-sort="descending" data-sort-key="lag"><a href="?q=o&amp;sort=lag"' in html
    assert 'data-sort-key="name"><a href="?q=o&amp;sort=name"' in html


def test_the_tables_list_pages(viewer):
    mf.mirror_state()
    mf.cluster(tables=7, partitions=1)
    html = _text(viewer.get("/ui/tables/?sort=name&per_page=3&page=3"))
    assert _rows(html, "data-table") == ["t0006_REALTIME"]
    assert "7\u20137 of 7" in html


# --- table detail -------------------------------------------------------------------------------


def _events():
    mf.mirror_state()
    events = mf.table("events", pauseless=True, lead_partition=3)
    mf.lead_partition(3, "Controller_c1_9000", ["events"])
    mf.partition(
        events,
        0,
        replicas={
            "Server_a_8001": mf.replica(offset=1200, upstream=1500, availabilityLagMs=2500),
            "Server_b_8002": mf.replica("ERROR", offset=900, upstream=1500),
        },
        records_lag=600,
    )
    mf.partition(events, 1)
    for seq in range(3):
        mf.segment(events, 0, seq)
    mf.segment(events, 0, 3, display_state="CONSUMING")
    mf.segment(events, 1, 0, display_state="CONSUMING")
    return events


def test_the_table_page_shows_config_partitions_and_replica_offsets(viewer):
    _events()
    resp = viewer.get("/ui/tables/events_REALTIME/")
    html = _text(resp)
    assert resp.status_code == 200
    assert 'data-field="tenant">DefaultTenant<' in html
    assert "topic <code>events-topic</code>" in html
    assert 'data-field="pauseless">enabled<' in html
    assert "partition 3</a> → Controller_c1_9000" in html
    replica = re.search(r'<tr data-partition="0" data-server="Server_a_8001".*?</tr>', html, re.S)
    assert replica is not None
    assert 'data-current-offset="1200">1,200<' in replica.group(0)
    assert 'data-upstream-offset="1500">1,500<' in replica.group(0)
    assert 'data-records-lag="300">300<' in replica.group(0)
    assert 'data-time-lag-ms="2500">2 s<' in replica.group(0)
    error_row = re.search(r'<tr data-partition="0" data-server="Server_b_8002"[^>]*>', html)
    assert 'class="problem"' in error_row.group(0)


def test_the_table_page_filters_and_pages_its_segments(viewer):
    _events()
    html = _text(viewer.get("/ui/tables/events_REALTIME/?state=CONSUMING"))
    assert sorted(_rows(html, "data-segment")) == [
        "events__0__3__20231114T2213Z",
        "events__1__0__20231114T2213Z",
    ]
    assert 'data-state-filter="ONLINE" data-count="3"' in html
    paged = _text(viewer.get("/ui/tables/events_REALTIME/?per_page=2&page=3"))
    assert len(_rows(paged, "data-segment")) == 1


def test_the_table_page_embeds_plotly_figures_from_the_samples(viewer):
    events = _events()
    for ago in (600, 300, 60):
        mf.sample(events, 0, ago, rows_per_s=ago / 10)
    mf.sample(events, 0, 7200)  # older than an hour: left out
    html = _text(viewer.get("/ui/tables/events_REALTIME/"))
    assert 'data-chart-json="rate"' in html
    assert '"type": "scatter"' in html
    assert html.count('"name": "partition 0"') == 3  # one trace per figure
    assert "/ui/vendor/plotly.min.js?v=" in html
    # No script or stylesheet from another host (a CSRF token may spell "cdn" by chance).
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "an off-site asset"


def test_a_refresh_that_does_not_ask_for_the_charts_skips_them(viewer):
    events = _events()
    mf.sample(events, 0, 60)
    resp = viewer.get(
        "/ui/tables/events_REALTIME/", headers={"X-Console-Regions": "partitions-region"}
    )
    assert 'data-chart-json="rate"' not in _text(resp)


def test_plotly_js_is_served_from_the_python_package(viewer):
    resp = viewer.get("/ui/vendor/plotly.min.js?v=1")
    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/javascript")
    assert "immutable" in resp["Cache-Control"]
    assert b"plotly" in resp.content[:2000].lower()


def test_a_viewer_sees_no_force_commit_button(viewer):
    _events()
    html = _text(viewer.get("/ui/tables/events_REALTIME/"))
    for operator_only in ("force-commit", "pause-button", "resume-button", "pause-dialog"):
        assert operator_only not in html
    assert 'data-role="viewer"' in html


def test_an_operator_gets_the_force_commit_dialog(operator):
    _events()
    html = _text(operator.get("/ui/tables/events_REALTIME/"))
    assert 'id="force-commit-button"' in html
    assert 'data-url="/tables/events_REALTIME/forceCommit"' in html
    assert 'data-status-url="/tables/forceCommitStatus/JOB_ID"' in html
    assert 'id="force-commit-reason" name="comment" required' in html
    assert "csrfmiddlewaretoken" in html
    assert 'data-role="operator"' in html


def test_an_operator_gets_pause_and_resume_dialogs(operator):
    _events()
    html = _text(operator.get("/ui/tables/events_REALTIME/"))
    assert 'id="pause-button"' in html and 'id="resume-button"' in html
    assert 'data-url="/tables/events_REALTIME/pauseConsumption"' in html
    assert 'data-url="/tables/events_REALTIME/resumeConsumption"' in html
    assert 'data-status-url="/tables/events_REALTIME/pauseStatus"' in html
    # What a pause will commit: each partition's consuming segment, one checkbox each.
    affected = re.findall(r'<tr data-partition="(\d+)" data-segment="([^"]*)"', html)
    assert affected and all(segment for _, segment in affected)
    for choice in ("lastConsumed", "largest", "smallest"):
        assert f'name="consumeFrom" value="{choice}"' in html


def test_an_offline_table_has_no_force_commit(operator):
    mf.mirror_state()
    mf.table("batch", "OFFLINE")
    html = _text(operator.get("/ui/tables/batch_OFFLINE/"))
    assert "force-commit-button" not in html
    assert "pause-button" not in html


def test_a_raw_table_name_redirects_to_the_typed_one(viewer):
    _events()
    assert viewer.get("/ui/tables/events/?state=ERROR")["Location"] == (
        "/ui/tables/events_REALTIME/?state=ERROR"
    )
    assert viewer.get("/ui/tables/events/partitions/1/")["Location"] == (
        "/ui/tables/events_REALTIME/partitions/1/"
    )
    segment = "events__0__1__20231114T2213Z"
    assert viewer.get(f"/ui/tables/events/segments/{segment}/")["Location"] == (
        f"/ui/tables/events_REALTIME/segments/{segment}/"
    )


@pytest.mark.parametrize(
    "path",
    [
        "/ui/tables/nope_REALTIME/",
        "/ui/tables/nope/",
        "/ui/tables/events_REALTIME/partitions/9/",
        "/ui/tables/events_REALTIME/segments/events__9__9__20231114T2213Z/",
        "/ui/tables/nope/segments/x/",
    ],
)
def test_unknown_things_get_a_404_page(viewer, path):
    _events()
    resp = viewer.get(path)
    assert resp.status_code == 404
    assert 'id="not-found"' in _text(resp)


# --- partition and segment detail ---------------------------------------------------------------


def test_the_partition_page_shows_its_replicas_and_only_its_segments(viewer):
    _events()
    html = _text(viewer.get("/ui/tables/events_REALTIME/partitions/0/"))
    assert set(re.findall(r'<tr data-partition="0" data-server="(\w+)"', html)) == {
        "Server_a_8001",
        "Server_b_8002",
    }
    segments = _rows(html, "data-segment")
    assert segments[0] == "events__0__3__20231114T2213Z"  # newest first
    assert all("__0__" in s for s in segments) and len(segments) == 4


def test_a_held_replica_says_why_it_asks_the_controller_nothing(viewer):
    events = mf.table("events")
    reason = "build failed: BuildError: bad pattern; next try at 2026-11-27 14:40:00 UTC"
    mf.partition(
        events,
        0,
        "COMMITTING",
        replicas={
            "Server_a_8001": mf.replica(phase="HOLDING", holdReason=reason),
            "Server_b_8002": mf.replica(phase="HOLDING"),
        },
    )
    html = _text(viewer.get("/ui/tables/events_REALTIME/partitions/0/"))
    assert html.count("data-hold-reason") == 1
    assert f'<div class="small detail" data-hold-reason>{reason}</div>' in html


def test_the_segment_page_shows_metadata_and_highlights_replica_mismatch(viewer):
    events = _events()
    mf.segment(
        events,
        2,
        7,
        display_state="ERROR",
        has_error=True,
        ideal_states={"Server_a_8001": "ONLINE", "Server_b_8002": "ONLINE"},
        external_states={"Server_a_8001": "ERROR", "Server_b_8002": "ONLINE"},
        metadata={"segment.realtime.status": "DONE", "segment.crc": "12345"},
    )
    html = _text(viewer.get("/ui/tables/events_REALTIME/segments/events__2__7__20231114T2213Z/"))
    assert 'data-key="segment.crc"' in html
    assert 'data-server="Server_a_8001" data-ideal="ONLINE" data-external="ERROR"' in html
    assert 'data-mismatch="true" class="problem"' in html
    assert 'data-mismatch="false"' in html
    assert "ERROR on Server_a_8001" in html
    assert 'data-field="download-url"' in html and "file:///deep/events__2__7" in html


# --- cluster-wide pages -------------------------------------------------------------------------


def test_the_errors_page_lists_error_and_all_offline_segments_with_reasons(viewer):
    events = _events()
    mf.segment(
        events,
        0,
        10,
        display_state="ERROR",
        has_error=True,
        external_states={"Server_a_8001": "ERROR", "Server_b_8002": "ONLINE"},
    )
    mf.segment(
        events,
        1,
        11,
        display_state="OFFLINE",
        all_offline=True,
        ideal_states={"Server_a_8001": "OFFLINE", "Server_b_8002": "OFFLINE"},
        external_states={"Server_a_8001": "OFFLINE"},
    )
    html = _text(viewer.get("/ui/errors/"))
    assert _rows(html, "data-segment") == [
        "events__0__10__20231114T2213Z",
        "events__1__11__20231114T2213Z",
    ]
    assert "ERROR on Server_a_8001" in html
    assert "OFFLINE on Server_a_8001; missing from the ExternalView on Server_b_8002" in html
    assert _rows(_text(viewer.get("/ui/errors/?table=zzz")), "data-segment") == []


def test_the_leaders_page_maps_24_partitions_to_controllers_and_tables(viewer):
    mf.mirror_state()
    mf.instance("Controller_c1_9000", kind="CONTROLLER", live=True)
    mf.instance("Controller_c2_9000", kind="CONTROLLER", live=False)
    for pid in range(24):
        mf.lead_partition(pid, f"Controller_c{pid % 2 + 1}_9000", [f"t{pid}"] if pid < 3 else [])
    html = _text(viewer.get("/ui/leaders/?table=t2"))
    assert len(_rows(html, "data-lead-partition")) == 24
    assert re.search(r'data-lead-partition="2"[^>]*class="match"', html)
    assert html.count("not live") == 12


def test_the_instances_page_filters_by_kind(viewer):
    mf.mirror_state()
    mf.instance("Server_1")
    mf.instance("Controller_1", kind="CONTROLLER")
    mf.lead_partition(0, "Controller_1", [])
    html = _text(viewer.get("/ui/instances/?kind=CONTROLLER"))
    assert _rows(html, "data-instance") == ["Controller_1"]
    assert "(0)" in html


def test_the_audit_page_filters_and_pages(viewer):
    mf.mirror_state()
    mf.audit("alice", "pause", "a_REALTIME", reason="maintenance")
    mf.audit("bob", "force_commit", "b_REALTIME", result="DENIED", status_code=403)
    mf.audit("alice", "resume", "a_REALTIME")

    def users(query: str) -> list[str]:
        return _rows(_text(viewer.get("/ui/audit/" + query)), "data-user")

    assert users("") == ["alice", "bob", "alice"]
    assert users("?user=ali") == ["alice", "alice"]
    assert users("?action=force_commit") == ["bob"]
    assert users("?result=DENIED") == ["bob"]
    assert users("?target=b_REAL") == ["bob"]
    assert users("?per_page=1&page=2") == ["bob"]
    # The filter named "user" must not hide the signed-in account in the header.
    assert 'id="current-user">vera<' in _text(viewer.get("/ui/audit/?user=bob"))


def test_the_nav_links_every_page_and_marks_the_current_one(viewer):
    mf.mirror_state()
    html = _text(viewer.get("/ui/errors/"))
    for name in ("overview", "tables", "errors", "leaders", "instances", "audit", "health"):
        assert f'data-nav="{name}"' in html
    assert 'href="/api/docs/"' in html
    assert 'data-nav="errors" aria-current="page"' in html
    assert 'data-nav="admin"' not in html  # not staff


# --- the mirror only, at a bounded cost -------------------------------------------------------

PAGES = [
    "/",
    "/?verdict=CONSUMING",
    "/ui/tables/",
    "/ui/tables/?sort=-lag&tenant=tenant1",
    "/ui/tables/t0001_REALTIME/",
    "/ui/tables/t0001_REALTIME/partitions/1/",
    "/ui/tables/t0001_REALTIME/segments/t0001__1__1__20231114T2213Z/",
    "/ui/errors/",
    "/ui/leaders/",
    "/ui/instances/",
    "/ui/audit/",
]


def test_pages_render_without_zookeeper(viewer, settings, monkeypatch):
    from kazoo.client import KazooClient

    def refuse(*args, **kwargs):
        raise AssertionError("a page tried to reach ZooKeeper")

    settings.ZK_HOSTS = "127.0.0.1:1"
    monkeypatch.setattr(KazooClient, "start", refuse)
    monkeypatch.setattr(KazooClient, "__init__", refuse)
    mf.mirror_state()
    mf.cluster(tables=3, partitions=2)
    for path in PAGES:
        assert viewer.get(path).status_code == 200, path


def _query_counts(client) -> dict[str, int]:
    counts = {}
    for path in PAGES:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(path).status_code == 200, path
        counts[path] = len(queries)
    return counts


def test_the_query_count_does_not_grow_with_the_cluster(viewer, django_assert_max_num_queries):
    mf.mirror_state()
    mf.cluster(tables=4, partitions=2)
    MirroredTable.objects.filter(name="t0001_REALTIME").update(paused=True)
    mf.audit("alice", "pause", "t0001_REALTIME")
    small = _query_counts(viewer)
    mf.cluster(tables=60, partitions=4, start=4)
    MirroredTable.objects.update(paused=True)
    for n in range(30):
        mf.audit("bob", "pause", f"t{n:04d}_REALTIME")
    big = _query_counts(viewer)
    assert big == small
    # 16: with the active alerts from Alertmanager (console.alerting.store.active), one query.
    with django_assert_max_num_queries(16):
        viewer.get("/")
    with django_assert_max_num_queries(16):
        viewer.get("/ui/tables/t0001_REALTIME/")
