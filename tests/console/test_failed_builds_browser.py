"""The errors page's "Failed builds" in Chromium at 1280 x 800: the longest table name and a
long error fit (nothing overflows), and an operator's "Retry now" (the real form, its CSRF token
included) clears the back-off and says so."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tables import build_backoffs
from tables.domain.names import MAX_RAW_TABLE_NAME_LENGTH
from tables.models import AuditEntry
from tests.accounts import grant
from tests.console.test_layout_browser import ARTIFACTS, RAW, _no_overflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONGEST = RAW[:MAX_RAW_TABLE_NAME_LENGTH]  # the longest raw name a table may have
TABLE = f"{LONGEST}_REALTIME"
SEGMENT = f"{LONGEST}__0__12__20261126T2000Z"
ERROR = (
    "BuildError: unsupported date-time pattern \"uuuu-MM-dd'T'HH:mm:ssXX\": "
    "[INCONSISTENT_BEHAVIOR_CROSS_VERSION.DATETIME_PATTERN_RECOGNITION] " + "detail " * 100
)


def test_failed_builds_fit_and_retry_now_clears_one(page, live_server, django_user_model):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    grant(
        django_user_model.objects.create_user("otto", password="a-long-test-password"), "operator"
    )
    for server in ("Server_a_8001", "Server_b_8002"):
        build_backoffs.record_failure(
            TABLE, SEGMENT, fingerprint="f", error=ERROR, server=server, now_ms=1_790_000_000_000
        )
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(live_server.url + "/login/?next=/ui/errors/")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "a-long-test-password")
    page.click("button[type=submit]")
    row = page.locator(f'#failed-builds tr[data-failed-segment="{SEGMENT}"]')
    expect(row).to_have_attribute("data-failures", "2")
    expect(row.locator(".failed-build-error")).to_contain_text("unsupported date-time pattern")
    expect(row).to_contain_text("Server_a_8001, Server_b_8002")
    _no_overflow(page, "errors-failed-builds")

    row.locator(".retry-build-button").click()
    expect(page.locator("#failed-build-retried")).to_contain_text(SEGMENT)
    expect(page.locator(f'#failed-builds tr[data-failed-segment="{SEGMENT}"]')).to_have_count(0)
    assert build_backoffs.read(TABLE, SEGMENT) is None
    entry = AuditEntry.objects.get(action="retry_build")
    assert (entry.username, entry.result, entry.target) == ("otto", "OK", f"{TABLE}/{SEGMENT}")
