"""The console in Debian's Chromium, driven by Playwright, against a live server."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests import envdefaults
from tests.accounts import grant

pytestmark = [
    pytest.mark.browser,
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
]
ARTIFACTS = Path(envdefaults.VAR_DIR) / "artifacts"


def _login(page, base_url: str, username: str, password: str) -> None:
    page.goto(base_url + "/")
    expect(page).to_have_url(base_url + "/login/?next=/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def test_overview_and_healthz_are_all_green(
    page, live_server, zk, celery_workers, django_user_model
):
    django_user_model.objects.create_user("oncall", password="a-long-test-password")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    _login(page, live_server.url, "oncall", "a-long-test-password")
    expect(page.locator("h1")).to_contain_text("Overview")
    expect(page.locator(".topbar .user")).to_contain_text("oncall")
    expect(page.locator("#current-role")).to_have_text("viewer")
    expect(page.locator("#mirror-status")).to_be_visible()
    expect(page.locator("#counters [data-counter]")).to_have_count(7)
    page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)

    page.click("#nav a[data-nav=health]")
    expect(page.locator("h1")).to_have_text("Health")
    rows = page.locator("#health tr[data-check]")
    expect(rows).to_have_count(7)
    # Spark's first job in the worker starts a JVM: allow for it.
    for index in range(7):
        expect(rows.nth(index)).to_have_attribute("data-state", "up", timeout=90_000)
    expect(page.locator("#health-updated")).to_contain_text("updated")
    page.screenshot(path=str(ARTIFACTS / "healthz.png"), full_page=True)


def test_the_table_page_draws_charts_refreshes_and_gates_force_commit(
    page, live_server, django_user_model
):
    """Mirror rows only (no cluster): Plotly from the package, auto-refresh, the dialog."""

    from tables.models import PartitionStatus
    from tests.console import mirror_factory as mf

    operator = django_user_model.objects.create_user("otto", password="a-long-test-password")
    grant(operator, "operator")
    django_user_model.objects.create_user("vera", password="a-long-test-password")
    mf.mirror_state()
    events = mf.table("events")
    mf.partition(events, 0, replicas={"Server_a_8001": mf.replica(offset=1200, upstream=1500)})
    for ago in (900, 600, 300, 60):
        mf.sample(events, 0, ago, rows_per_s=ago / 10)
    url = live_server.url + "/ui/tables/events_REALTIME/"

    _login(page, live_server.url, "otto", "a-long-test-password")
    page.goto(url)
    cell = page.locator('tr[data-partition="0"][data-server="Server_a_8001"] [data-current-offset]')
    expect(cell).to_have_attribute("data-current-offset", "1200")
    expect(page.locator("#chart-rate .main-svg").first).to_be_visible(timeout=20_000)
    # The next sync moves the offset: the page shows it without a reload.
    PartitionStatus.objects.filter(table=events, partition=0).update(
        replicas={"Server_a_8001": mf.replica(offset=1400, upstream=1500)}
    )
    expect(cell).to_have_attribute("data-current-offset", "1400", timeout=20_000)
    expect(page.locator("#refresh-status")).to_contain_text("updated")

    page.click("#force-commit-button")
    expect(page.locator("#force-commit-dialog")).to_be_visible()
    expect(page.locator("#refresh-status")).to_contain_text("waits for the dialog", timeout=5_000)
    page.click("#force-commit-cancel")
    page.screenshot(path=str(ARTIFACTS / "table.png"), full_page=True)

    page.context.clear_cookies()
    _login(page, live_server.url, "vera", "a-long-test-password")
    page.goto(url)
    expect(page.locator("#partitions")).to_be_visible()
    expect(page.locator("#force-commit-button")).to_have_count(0)


def test_a_wrong_password_is_refused(page, live_server, django_user_model):
    django_user_model.objects.create_user("oncall", password="a-long-test-password")
    _login(page, live_server.url, "oncall", "wrong")
    expect(page.locator(".error")).to_contain_text("enter a correct username and password")
    page.goto(live_server.url + "/")
    expect(page).to_have_url(live_server.url + "/login/?next=/")


def test_bulk_pause_previews_then_applies(page, live_server, servers, topic, zk, django_user_model):
    """The Tables page's bulk form: a dry run lists the tenant's tables; Apply pauses them."""
    from tables.cluster import context
    from tables.controller.resources import ResourceManager
    from tables.domain.idealstate import pause_state
    from tables.models import AuditEntry
    from tables.zk.records import read_record
    from tests.cluster_fixtures import PATHS, load
    from tests.console import mirror_factory as mf
    from tests.ingest_cluster import table_config

    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    mf.mirror_state()
    mf.table("githubEvents", tenant="DefaultTenant_REALTIME")
    operator = django_user_model.objects.create_user("otto", password="a-long-test-password")
    grant(operator, "operator")

    _login(page, live_server.url, "otto", "a-long-test-password")
    page.goto(live_server.url + "/ui/tables/")
    page.click("#bulk summary")
    page.select_option("#bulk-tenant", "DefaultTenant_REALTIME")
    expect(page.locator("#bulk-apply")).to_be_disabled()
    page.click("#bulk-preview")
    row = page.locator('#bulk-result tr[data-table="githubEvents_REALTIME"]')
    expect(row).to_have_attribute("data-result", "preview")
    expect(row).to_contain_text("pause; commit 4 segment(s)")
    assert not pause_state(read_record(zk, PATHS.idealstate("githubEvents_REALTIME")).record).paused
    expect(page.locator("#bulk-apply")).to_be_enabled()
    page.fill("#bulk-reason", "tenant maintenance")
    page.click("#bulk-apply")
    expect(row).to_have_attribute("data-result", "OK")
    assert pause_state(read_record(zk, PATHS.idealstate("githubEvents_REALTIME")).record).paused
    audit = AuditEntry.objects.get(action="pause")
    assert (audit.username, audit.reason, audit.source) == ("otto", "tenant maintenance", "page")
    page.screenshot(path=str(ARTIFACTS / "bulk-pause.png"), full_page=True)
