"""The console in Debian's Chromium, driven by Playwright, against a live server."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests import envdefaults

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


def test_home_and_healthz_are_all_green(page, live_server, zk, celery_workers, django_user_model):
    django_user_model.objects.create_user("oncall", password="a-long-test-password")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    _login(page, live_server.url, "oncall", "a-long-test-password")
    expect(page.locator("h1")).to_contain_text("Cluster PinotCluster")
    expect(page.locator(".topbar .user")).to_contain_text("oncall")
    rows = page.locator("#health tr[data-check]")
    expect(rows).to_have_count(6)
    # Spark's first job in the worker starts a JVM: allow for it.
    for index in range(6):
        expect(rows.nth(index)).to_have_attribute("data-state", "up", timeout=90_000)
    page.screenshot(path=str(ARTIFACTS / "home.png"), full_page=True)

    page.goto(live_server.url + "/healthz")
    expect(page.locator("h1")).to_have_text("Health")
    for index in range(6):
        expect(rows.nth(index)).to_have_attribute("data-state", "up", timeout=90_000)
    expect(page.locator("#health-updated")).to_contain_text("updated")
    page.screenshot(path=str(ARTIFACTS / "healthz.png"), full_page=True)


def test_a_wrong_password_is_refused(page, live_server, django_user_model):
    django_user_model.objects.create_user("oncall", password="a-long-test-password")
    _login(page, live_server.url, "oncall", "wrong")
    expect(page.locator(".error")).to_contain_text("enter a correct username and password")
    page.goto(live_server.url + "/")
    expect(page).to_have_url(live_server.url + "/login/?next=/")
