"""Failed builds backing off (issue 23) on the real database: the record (`tables.build_backoffs`),
the errors page's "Failed builds" section with its "Retry now" form, and the JSON API
(`GET /api/v1/failedBuilds`, `POST /api/v1/tables/{t}/segments/{s}/retryBuild`).

Covered: failures count under one fingerprint with a doubling wait and start again under a new
one, a success clears the record; the page lists table, segment, servers, failures, the trimmed
error, the times and the next retry, with the button for operators only; Retry now (page and API)
clears the record, audited OK; a viewer is refused 403 audited DENIED, malformed names 400 and a
segment without a record 404 (audited REJECTED), nothing changed; the form needs the CSRF token;
an anonymous API call is 401.
"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tables import build_backoffs
from tables.models import AuditEntry, FailedBuild
from tests.accounts import grant

pytestmark = [pytest.mark.django_db]

TABLE = "events_REALTIME"
SEGMENT = "events__0__3__20261126T2000Z"
OTHER = "events__1__0__20261126T2000Z"
PASSWORD = "a-long-test-password"
T0 = 1_790_000_000_000  # epoch ms
ERROR = "BuildError: cannot build events__0__3: unsupported date-time pattern 'yyyyb' " + "x" * 400


def _fail(segment: str = SEGMENT, fingerprint: str = "f1", server: str = "Server_a_1", at=T0):
    return build_backoffs.record_failure(
        TABLE, segment, fingerprint=fingerprint, error=ERROR, server=server, now_ms=at
    )


def _user(django_user_model, name: str, role: str):
    return grant(django_user_model.objects.create_user(name, password=PASSWORD), role)


@pytest.fixture
def page_operator(django_user_model) -> Client:
    client = Client()
    client.force_login(_user(django_user_model, "otto", "operator"))
    return client


@pytest.fixture
def page_viewer(django_user_model) -> Client:
    client = Client()
    client.force_login(_user(django_user_model, "vera", "viewer"))
    return client


@pytest.fixture
def api_operator(django_user_model) -> APIClient:
    client = APIClient()
    client.force_authenticate(_user(django_user_model, "op", "operator"))
    return client


@pytest.fixture
def api_viewer(django_user_model) -> APIClient:
    client = APIClient()
    client.force_authenticate(_user(django_user_model, "oncall", "viewer"))
    return client


def test_the_record_counts_under_one_fingerprint_and_a_success_clears_it(settings):
    settings.BUILD_FAILURE_BACKOFF_SECONDS = 60
    settings.BUILD_FAILURE_BACKOFF_MAX_SECONDS = 100
    first = _fail()
    assert (first.failures, first.next_retry_ms) == (1, T0 + 60_000)
    second = _fail(server="Server_b_2", at=T0 + 61_000)
    assert (second.failures, second.next_retry_ms) == (2, T0 + 161_000)  # capped at 100 s
    assert second.servers == ("Server_a_1", "Server_b_2")
    assert build_backoffs.hold(TABLE, SEGMENT, "f1", T0 + 100_000) is not None
    assert build_backoffs.hold(TABLE, SEGMENT, "f2", T0 + 100_000) is None  # a config fix
    assert build_backoffs.hold(TABLE, SEGMENT, "f1", T0 + 161_000) is None  # its time came
    fixed = _fail(fingerprint="f2", at=T0 + 200_000)
    assert (fixed.failures, fixed.first_failure_ms) == (1, T0 + 200_000)
    assert FailedBuild.objects.count() == 1
    build_backoffs.succeeded(TABLE, SEGMENT)
    assert build_backoffs.read(TABLE, SEGMENT) is None


def test_the_errors_page_lists_failed_builds_with_the_button_for_operators_only(
    page_viewer, page_operator
):
    _fail()
    _fail(segment=OTHER, at=T0 - 1000)
    html = page_viewer.get("/ui/errors/").content.decode()
    assert 'id="failed-builds"' in html
    assert f'data-failed-segment="{SEGMENT}"' in html and f'data-failed-segment="{OTHER}"' in html
    assert html.index(SEGMENT) < html.index(OTHER)  # the newest failure first
    assert "Server_a_1" in html and 'data-failures="1"' in html
    assert "unsupported date-time pattern" in html and "x" * 300 not in html.split("title=")[0]
    assert "retry-build-button" not in html
    html = page_operator.get("/ui/errors/?table=events").content.decode()
    assert f'action="/ui/errors/{TABLE}/{SEGMENT}/retry/"' in html
    assert "retry-build-button" in html and "csrfmiddlewaretoken" in html
    assert "No failed build" in page_viewer.get("/ui/errors/?table=nothing").content.decode()


def test_retry_now_on_the_page_clears_the_back_off_and_is_audited(page_operator):
    _fail()
    resp = page_operator.post(f"/ui/errors/{TABLE}/{SEGMENT}/retry/")
    assert resp.status_code == 302 and resp["Location"] == f"/ui/errors/?retried={SEGMENT}"
    assert build_backoffs.read(TABLE, SEGMENT) is None
    entry = AuditEntry.objects.get(action="retry_build")
    assert (entry.username, entry.result, entry.target) == ("otto", "OK", f"{TABLE}/{SEGMENT}")
    assert entry.detail == {"table": TABLE, "segment": SEGMENT, "failures": 1}
    html = page_operator.get(resp["Location"]).content.decode()
    assert 'id="failed-build-retried"' in html and f'data-failed-segment="{SEGMENT}"' not in html


def test_retry_now_on_the_page_is_refused_for_viewers_bad_names_and_unknown_segments(
    page_viewer, page_operator
):
    _fail()
    refused = page_viewer.post(f"/ui/errors/{TABLE}/{SEGMENT}/retry/")
    assert refused.status_code == 403
    assert "may not retry a failed build" in refused.content.decode()
    bad = page_operator.post(f"/ui/errors/{TABLE}/not-a-segment/retry/")
    assert bad.status_code == 400 and "not in LLC format" in bad.content.decode()
    unknown = page_operator.post(f"/ui/errors/{TABLE}/{OTHER}/retry/")
    assert unknown.status_code == 404
    assert page_operator.get(f"/ui/errors/{TABLE}/{SEGMENT}/retry/").status_code == 405
    assert build_backoffs.read(TABLE, SEGMENT) is not None  # nothing changed
    results = list(
        AuditEntry.objects.filter(action="retry_build")
        .order_by("id")
        .values_list("result", "status_code")
    )
    assert results == [("DENIED", 403), ("REJECTED", 400), ("REJECTED", 404)]


def test_the_retry_form_needs_the_csrf_token(django_user_model):
    _fail()
    client = Client(enforce_csrf_checks=True)
    client.force_login(_user(django_user_model, "otto", "operator"))
    assert client.post(f"/ui/errors/{TABLE}/{SEGMENT}/retry/").status_code == 403
    assert build_backoffs.read(TABLE, SEGMENT) is not None


def test_the_api_lists_failed_builds(api_viewer):
    record = _fail()
    found = api_viewer.get("/api/v1/failedBuilds?table=events").json()["failedBuilds"]
    assert found == [
        {
            "table": TABLE,
            "segment": SEGMENT,
            "failures": 1,
            "error": ERROR,
            "fingerprint": "f1",
            "servers": ["Server_a_1"],
            "firstFailureMs": T0,
            "lastFailureMs": T0,
            "nextRetryMs": record.next_retry_ms,
            "waiting": False,  # T0 is in the past
        }
    ]
    assert api_viewer.get("/api/v1/failedBuilds?table=nothing").json() == {"failedBuilds": []}
    assert APIClient().get("/api/v1/failedBuilds").status_code in (401, 403)


def test_the_api_retry_clears_the_back_off_and_refuses_bad_input(api_operator, api_viewer):
    _fail()
    url = f"/api/v1/tables/{TABLE}/segments/{{}}/retryBuild"
    assert api_viewer.post(url.format(SEGMENT)).status_code == 403
    assert APIClient().post(url.format(SEGMENT)).status_code == 401
    for segment, reason in [
        ("nope", "Segment name is not in LLC format: nope"),
        ("other__0__1__20261126T2000Z", "is not a segment of table events"),
    ]:
        resp = api_operator.post(url.format(segment))
        assert resp.status_code == 400 and reason in resp.json()["error"]
    bad_table = api_operator.post(f"/api/v1/tables/bad%20name/segments/{SEGMENT}/retryBuild")
    assert bad_table.status_code == 400 and bad_table.json()["error"]
    assert api_operator.post(url.format(OTHER)).status_code == 404
    assert build_backoffs.read(TABLE, SEGMENT) is not None  # nothing changed on error
    resp = api_operator.post(url.format(SEGMENT) + "?comment=config+fixed+upstream")
    assert resp.status_code == 200
    assert resp.json() == {"table": TABLE, "segment": SEGMENT, "failures": 1}
    assert build_backoffs.read(TABLE, SEGMENT) is None
    ok = AuditEntry.objects.get(action="retry_build", result="OK")
    assert (ok.username, ok.reason, ok.source) == ("op", "config fixed upstream", "api")
    assert AuditEntry.objects.filter(action="retry_build", result="DENIED").count() == 1
