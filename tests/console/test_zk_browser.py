"""The console's ZooKeeper browser (`/ui/zk/`) in Debian's Chromium, driven by Playwright, against a
live server and the real ZooKeeper (an initialised cluster in the test's chroot).

A viewer browses (the tree, a znode's JSON and stat) and gets no edit controls, and the API refuses
the viewer's write even when sent from the page's own session. An admin's edit previews a diff;
saved after someone else changed the znode, it is refused with the server's message and writes
nothing; reloaded and saved again, it succeeds and shows the new version; the audit log page shows
both attempts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tables.domain.znrecord import ZNRecord
from tables.zk.records import create_record, read_record
from tests import envdefaults
from tests.accounts import grant
from tests.cluster_fixtures import PATHS

pytestmark = [pytest.mark.browser, pytest.mark.zk, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(envdefaults.VAR_DIR) / "artifacts"
PASSWORD = "a-long-test-password"
NODE = f"{PATHS.root}/PROPERTYSTORE/zkBrowserPage"


def _record(value: str) -> ZNRecord:
    return ZNRecord("zkBrowserPage", simple_fields={"k": value})


@pytest.fixture
def node(cluster) -> str:
    create_record(cluster, NODE, _record("v0"))
    return NODE


def _login(page, base_url: str, username: str) -> None:
    page.goto(base_url + "/login/?next=/ui/zk/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("ZooKeeper")


def _open(page, base_url: str, path: str) -> None:
    page.goto(f"{base_url}/ui/zk/?path={path}")
    expect(page.locator("#zk-path")).to_have_text(path)


def test_a_viewer_browses_and_cannot_edit(page, live_server, node, cluster, django_user_model):
    django_user_model.objects.create_user("vera", password=PASSWORD)
    _login(page, live_server.url, "vera")
    expect(page.locator("#nav a[data-nav=zk]")).to_have_attribute("aria-current", "page")
    # The cluster's root is selected first; its children are listed in the tree.
    expect(page.locator("#zk-path")).to_have_text(PATHS.root)
    configs = page.locator(f'li[data-path="{PATHS.root}/CONFIGS"]')
    expect(configs).to_be_visible()
    configs.locator(":scope > .zk-toggle").click()
    cluster_config = page.locator(f'li[data-path="{PATHS.root}/CONFIGS/CLUSTER"]')
    expect(cluster_config).to_be_visible()

    _open(page, live_server.url, node)
    expect(page.locator("#zk-data")).to_have_attribute("data-version", "0")
    expect(page.locator("#zk-data")).to_contain_text('"k": "v0"')
    expect(page.locator('#zk-stat tr[data-stat="numChildren"] td')).to_have_attribute(
        "data-value", "0"
    )
    expect(page.locator('#zk-stat tr[data-stat="dataLength"] td')).to_have_attribute(
        "data-value", str(len(_record("v0").to_json().encode()))
    )
    expect(page.locator("#zk-edit")).to_have_count(0)
    expect(page.locator("#zk-editor")).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / "zk-viewer.png"), full_page=True)

    # The viewer's own session, with the CSRF token, is still refused by the API.
    answer = page.evaluate(
        """async (path) => {
          const token = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";
          const query = new URLSearchParams({path: path, expectedVersion: "0", comment: "try"});
          const resp = await fetch("/zk/put?" + query, {method: "PUT", credentials: "same-origin",
            headers: {"X-CSRFToken": token, "X-Console-Page": "1",
                      "Content-Type": "application/json"},
            body: JSON.stringify({id: "zkBrowserPage", simpleFields: {k: "viewer"}})});
          return {status: resp.status, body: await resp.json()};
        }""",
        node,
    )
    assert answer["status"] == 403, answer
    assert "admin" in answer["body"]["error"]
    found = read_record(cluster, node)
    assert (found.record.simple_fields["k"], found.version) == ("v0", 0)


def _edit(page, value: str, reason: str) -> None:
    page.click("#zk-edit")
    expect(page.locator("#zk-editor")).to_be_visible()
    text = json.loads(page.input_value("#zk-text"))
    text["simpleFields"]["k"] = value
    page.fill("#zk-text", json.dumps(text, indent=2))
    expect(page.locator("#zk-save")).to_be_disabled()  # not before a preview
    page.click("#zk-preview")
    expect(page.locator("#zk-diff .add")).to_contain_text(f'"k": "{value}"')
    page.fill("#zk-reason", reason)
    page.click("#zk-save")


def test_an_admins_stale_edit_is_refused_and_a_fresh_one_saved(
    page, live_server, node, cluster, django_user_model
):
    grant(django_user_model.objects.create_user("ada", password=PASSWORD), "admin")
    _login(page, live_server.url, "ada")
    _open(page, live_server.url, node)
    expect(page.locator("#zk-data")).to_have_attribute("data-version", "0")

    # Someone else changes the znode after the page loaded version 0.
    cluster.set(node, _record("concurrent").to_json().encode(), version=0)
    _edit(page, "stale", "late fix")
    result = page.locator("#zk-result")
    expect(result).to_have_attribute("data-state", "error")
    expect(result).to_contain_text("409")
    expect(result).to_contain_text("is at version 1, not the expected version 0")
    found = read_record(cluster, node)
    assert (found.record.simple_fields["k"], found.version) == ("concurrent", 1)
    page.screenshot(path=str(ARTIFACTS / "zk-stale.png"), full_page=True)

    # Reload the znode from the tree, edit the fresh version.
    page.click(f'li[data-path="{node}"] > .zk-name')
    expect(page.locator("#zk-data")).to_have_attribute("data-version", "1")
    expect(page.locator("#zk-data")).to_contain_text('"k": "concurrent"')
    _edit(page, "fresh", "fix the record")
    expect(result).to_have_attribute("data-state", "ok")
    expect(result).to_have_attribute("data-version", "2")
    expect(result).to_contain_text("version 2")
    expect(page.locator("#zk-data")).to_contain_text('"k": "fresh"')
    found = read_record(cluster, node)
    assert (found.record.simple_fields["k"], found.version) == ("fresh", 2)

    page.click("#nav a[data-nav=audit]")
    rows = page.locator(f'#audit tr[data-action="zk_put"][data-target="{node}"]')
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-result", "OK")
    expect(rows.nth(0)).to_contain_text("fix the record")
    expect(rows.nth(0)).to_contain_text("page")
    expect(rows.nth(1)).to_have_attribute("data-result", "REJECTED")
    expect(rows.nth(1)).to_contain_text("late fix")
    page.screenshot(path=str(ARTIFACTS / "zk-audit.png"), full_page=True)
