"""The pages at 1280 x 800 in Chromium with a 200-character table name: nothing overflows, long
names are shortened with the full name on hover, and a stuck commit reads as a warning whose
duration grows between two page loads (mirror rows only: no cluster, no sync)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests import envdefaults
from tests.accounts import grant
from tests.poll import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ARTIFACTS = Path(envdefaults.VAR_DIR) / "artifacts"
RAW = ("clickstream_events_from_the_checkout_service_" * 5)[:200]
TABLE = f"{RAW}_REALTIME"

OVERFLOW_JS = """() => {
  const root = document.documentElement;
  const width = root.clientWidth;
  const wide = [];
  for (const el of document.querySelectorAll("main *")) {
    const box = el.getBoundingClientRect();
    if (box.width > width || box.right > width + 1) {
      wide.push(`${el.tagName.toLowerCase()}.${el.className} ${Math.round(box.width)}px`);
    }
  }
  return {scrollWidth: root.scrollWidth, clientWidth: width, wide: wide.slice(0, 8)};
}"""


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def _mirror() -> None:
    from tests.console import mirror_factory as mf

    now = timezone.now()
    mf.mirror_state()
    table = mf.table(RAW, replication=2, health="WARNING", flush_time="1h")
    stuck_since = now - dt.timedelta(minutes=7)
    replicas = {
        "Server_a_8001": mf.replica(
            phase="CATCHING_UP",
            phaseSinceMs=_ms(stuck_since + dt.timedelta(seconds=20)),
            completingSinceMs=_ms(stuck_since),
        ),
        "Server_b_8002": mf.replica(
            phase="HOLDING", phaseSinceMs=_ms(stuck_since), completingSinceMs=_ms(stuck_since)
        ),
    }
    mf.partition(
        table,
        0,
        verdict="COMMIT_OVERDUE",
        health="WARNING",
        replicas=replicas,
        verdict_detail="commit for 7 min 00 s: Server_a_8001 CATCHING_UP for 6 min 40 s, "
        "Server_b_8002 HOLDING for 7 min 00 s; past the 5 min 00 s completion time limit "
        "(MAX_SEGMENT_COMPLETION_TIME)",
    )
    mf.partition(  # one replica of two up, and nobody knows the upstream offset
        table,
        1,
        verdict="UNDER_REPLICATED",
        health="WARNING",
        replicas={"Server_a_8001": mf.replica(upstreamOffset=None), "Server_b_8002": {}},
        upstream_offset=None,
        verdict_detail="1 of 2 replicas CONSUMING or ONLINE in the ExternalView",
    )
    for partition in (0, 1):
        mf.segment(table, partition, 0)
        mf.segment(table, partition, 1, display_state="CONSUMING")
    mf.segment(table, 1, 2, display_state="ERROR", has_error=True)
    mf.table("events")
    mf.audit(target=TABLE, reason="maintenance of " + RAW)


def _no_overflow(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"layout-{name}.png"), full_page=True)
    found = page.evaluate(OVERFLOW_JS)
    assert found["scrollWidth"] <= found["clientWidth"], (name, found)
    assert not found["wide"], (name, found)


def _seconds(text: str) -> int:
    """`commit for 7 min 03 s` -> 423."""
    match = re.search(r"commit for (?:(\d+) min )?(\d+) s", text)
    assert match, text
    return int(match.group(1) or 0) * 60 + int(match.group(2))


def test_long_names_fit_1280_px_and_a_stuck_commit_warns_with_a_growing_duration(
    page, live_server, django_user_model
):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    user = django_user_model.objects.create_user("otto", password="a-long-test-password")
    grant(user, "operator")
    _mirror()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(live_server.url + "/login/?next=/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "a-long-test-password")
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text("Overview")

    # The overview: the name shortened, the full name on hover; the stuck commit warns.
    row = page.locator(f'#triage tr[data-table="{TABLE}"][data-partition="0"]')
    expect(row).to_have_attribute("data-health", "WARNING")
    expect(row.locator("[data-verdict]")).to_have_text("Commit overdue")
    expect(row.locator("th a.trunc")).to_have_attribute("title", TABLE)
    other = page.locator(f'#triage tr[data-table="{TABLE}"][data-partition="1"]')
    expect(other.locator("[data-flag=under-replicated]")).to_have_text("1/2 replicas up")
    expect(other.locator("td[data-records-lag]")).to_have_text("?")
    _no_overflow(page, "overview")
    first = _seconds(row.locator("td.detail").inner_text())
    assert first >= 7 * 60

    def grown() -> int:
        page.reload()
        now = _seconds(
            page.locator(
                f'#triage tr[data-table="{TABLE}"][data-partition="0"] td.detail'
            ).inner_text()
        )
        return now if now > first else 0

    assert wait_until(grown, timeout=15, interval=0.5, what="the commit's duration grows") > first

    for name, path in (
        ("tables", "/ui/tables/"),
        ("table", f"/ui/tables/{TABLE}/"),
        ("partition", f"/ui/tables/{TABLE}/partitions/0/"),
        ("audit", "/ui/audit/"),
        ("errors", "/ui/errors/"),
    ):
        page.goto(live_server.url + path)
        expect(page.locator("main h1")).to_be_visible()
        _no_overflow(page, name)

    page.goto(live_server.url + "/ui/tables/")
    listed = page.locator(f'#tables tr[data-table="{TABLE}"]')
    expect(listed.locator("th a.trunc")).to_have_attribute("title", TABLE)
    expect(listed).to_have_attribute("data-under-replicated", "1")
