"""The leaders page (/ui/leaders/) over a mirror synced from the real ZooKeeper: the controllers
and the cluster leader, the partitions without a leader since when and their tables, the
partitions table, and the cluster leader's leadership history (paged, filtered)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from playwright.sync_api import expect

from tables.cluster.context import ClusterContext
from tables.controller.resources import ResourceManager
from tables.domain.leadership import lead_partition
from tables.domain.table_config import switch_stream_type
from tables.mirror.sync import sync_cluster
from tables.models import LeadershipChange
from tests.cluster_fixtures import PATHS, load
from tests.console import mirror_factory as mf
from tests.console.test_layout_browser import OVERFLOW_JS
from tests.console.test_layout_browser import TABLE as LONG
from tests.tables import leaders as lc

pytestmark = pytest.mark.django_db
A, B = 9000, 9001
TABLE = "githubEvents_REALTIME"


@pytest.fixture
def viewer(client, django_user_model):
    user = django_user_model.objects.create_user("vera", password="a-long-test-password")
    client.force_login(user)
    return client


def _rows(html: str, attribute: str) -> list[str]:
    return re.findall(rf'<tr [^>]*?{attribute}="([^"]*)"', html)


def _row(html: str, attribute: str, value: str) -> str:
    """The whole <tr> whose `attribute` is `value`."""
    found = re.search(rf'<tr [^>]*?{attribute}="{re.escape(value)}".*?</tr>', html, re.S)
    assert found, (attribute, value)
    return found.group(0)


def _page(viewer, query: str = "") -> str:
    resp = viewer.get("/ui/leaders/" + query)
    assert resp.status_code == 200
    return resp.content.decode()


def _now_ms() -> int:
    return int(timezone.now().timestamp() * 1000)


def _create_table(ctx: ClusterContext, topic: str) -> None:
    config = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic, {})
    config["segmentsConfig"]["replication"] = "2"
    manager = ResourceManager(ctx)
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(config)


@pytest.mark.zk
@pytest.mark.redis
def test_the_page_shows_the_leaderless_partitions_their_tables_and_the_history(
    viewer, servers, zk, topic, settings
):
    ctx = ClusterContext(zk, PATHS, settings.REDIS_URL)
    _create_table(ctx, topic)
    assert lead_partition("githubEvents") == 15
    a, b = lc.controller(zk, A), lc.controller(zk, B, live=False)
    lc.set_view(zk, {i: a if i < 12 else b for i in range(24)})  # B died, the view is stale
    lc.lead(zk, A)
    lost_ms = _now_ms() - 2 * 3_600_000
    lc.change(15, "", b, lost_ms - 60_000, "unassigned", cluster_leader=a, leaderless_ms=4_000)
    lc.change(15, b, "", lost_ms, f"{b} is not live (rebalance delay 300000 ms)", cluster_leader=a)
    for i in range(60):  # older history, on the second page
        lc.change(i % 12, "", a, lost_ms - 3_600_000 - i * 1_000, "rebalance", cluster_leader=a)
    report = sync_cluster(ctx)
    assert report.ok, report.lines()

    html = _page(viewer)

    # The controllers, the cluster leader among them, live or not.
    assert _rows(html, "data-lead-controller") == [a, b]
    assert 'data-partitions="12" data-cluster-leader="true" data-live="true"' in _row(
        html, "data-lead-controller", a
    )
    assert 'data-partitions="0" data-cluster-leader="false" data-live="false"' in _row(
        html, "data-lead-controller", b
    )
    # The leaderless partitions, the longest first (15: since the cluster leader's record).
    assert _rows(html, "data-leaderless-partition") == [
        str(p) for p in [15, *range(12, 15), *range(16, 24)]
    ]
    row = _row(html, "data-leaderless-partition", "15")
    assert f'data-since="{lc.moment(lost_ms).isoformat()}"' in row
    assert re.search(r'data-field="leaderless-for">2 h 0\d min<', row)
    assert f'href="/ui/tables/{TABLE}/"' in row
    assert re.search(r'data-counter="tables-affected"><dt>[^<]*</dt><dd>1</dd>', html)
    assert re.search(r'data-counter="leaderless"><dt>[^<]*</dt><dd>12</dd>', html)
    # The partition table keeps its rows and attributes.
    assert len(_rows(html, "data-lead-partition")) == 24
    assert 'data-controller="" data-tables="1" data-leaderless="true"' in _row(
        html, "data-lead-partition", "15"
    )
    # The history: newest first, 50 a page.
    changes = _rows(html, "data-change-partition")
    assert len(changes) == 50 and changes[:2] == ["15", "15"]
    newest = _row(html, "data-change", str(LeadershipChange.objects.first().pk))
    assert f'data-from="{b}" data-to=""' in newest and "rebalance delay 300000 ms" in newest
    assert "1\N{EN DASH}50 of 62" in html
    assert len(_rows(_page(viewer, "?page=2"), "data-change-partition")) == 12


def test_the_history_filters_by_partition_and_controller(viewer):
    mf.mirror_state()
    a, b = lc.controller_id(A), lc.controller_id(B)
    lc.change(3, "", a, 1_000_000, "unassigned")
    lc.change(3, a, "", 2_000_000, f"{a} is not live")
    lc.change(3, "", b, 2_004_000, f"{a} is not live", leaderless_ms=4_000)
    lc.change(7, "", b, 3_000_000, "unassigned")

    html = _page(viewer, "?partition=3")
    assert _rows(html, "data-change-partition") == ["3", "3", "3"]
    assert ">4 s<" in _row(html, "data-to", b)
    assert _rows(_page(viewer, f"?controller={b}"), "data-change-partition") == ["7", "3"]
    assert _rows(_page(viewer, f"?partition=3&controller={a}"), "data-to") == ["", a]
    # Not a partition number: no filter; no match: said so.
    assert len(_rows(_page(viewer, "?partition=x"), "data-change-partition")) == 4
    assert "No leadership change recorded for these filters" in _page(viewer, "?partition=9")
    # The pager keeps the filters.
    paged = _page(viewer, "?partition=3&per_page=1")
    assert "partition=3&amp;page=2" in paged


def test_a_disabled_resource_says_the_cluster_leader_leads_every_table(viewer):
    mf.mirror_state(cluster_leader=lc.controller_id(A), lead_resource_enabled=False)
    mf.instance(lc.controller_id(A), kind="CONTROLLER")
    for pid in range(24):
        mf.lead_partition(pid, "", [f"t{pid}_REALTIME"] if pid == 2 else [])

    html = _page(viewer)

    assert 'id="lead-resource-disabled"' in html
    assert "leads every table (Pinot's fallback)" in html
    assert _rows(html, "data-leaderless-partition") == []
    assert "the cluster leader (resource disabled)" in _row(html, "data-lead-partition", "2")


def test_the_page_costs_the_same_queries_with_a_long_history(viewer):
    mf.mirror_state(cluster_leader=lc.controller_id(A), lead_resource_enabled=True)
    mf.instance(lc.controller_id(A), kind="CONTROLLER")
    for pid in range(24):
        mf.lead_partition(pid, lc.controller_id(A) if pid % 2 else "", [f"t{pid}"])
    lc.change(1, "", lc.controller_id(A), 1_000_000)
    with CaptureQueriesContext(connection) as short:
        _page(viewer)
    for i in range(300):
        lc.change(i % 24, lc.controller_id(A), "", 2_000_000 + i)
    with CaptureQueriesContext(connection) as long:
        html = _page(viewer)
    assert len(_rows(html, "data-change-partition")) == 50
    assert len(long) == len(short)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_long_table_names_fit_1280_px(page, live_server, django_user_model):
    """A leaderless partition leading a table of 200 characters: shortened, named in full on
    hover, and nothing wider than the window."""
    django_user_model.objects.create_user("otto", password="a-long-test-password")
    a = lc.controller_id(A)
    mf.mirror_state(cluster_leader=a, lead_resource_enabled=True)
    mf.instance(a, kind="CONTROLLER")
    for pid in range(24):
        mf.lead_partition(pid, a if pid < 12 else "", [LONG] if pid == 15 else [])
    lc.change(15, a, "", _now_ms() - 60_000, f"{a} is not live ({'x' * 300})", cluster_leader=a)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(live_server.url + "/login/?next=/ui/leaders/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "a-long-test-password")
    page.click("button[type=submit]")

    link = page.locator('#leaderless-partitions tr[data-leaderless-partition="15"] a.trunc')
    expect(link).to_have_attribute("title", LONG)
    found = page.evaluate(OVERFLOW_JS)
    assert found["scrollWidth"] <= found["clientWidth"], found
    assert not found["wide"], found
