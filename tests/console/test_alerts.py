"""Alertmanager's webhook into the console and the active alerts on the pages.

`POST /api/v1/alerts/webhook` takes Alertmanager's notification JSON with the Bearer token
ALERT_WEBHOOK_TOKEN (401 without or with a wrong one, 403 while none is configured, 400 with the
reason for a body that is not a notification, nothing stored then); firing alerts show on the
overview and on their table's page (not on another table's), a resolved notification takes them
off. The pages' silence form refuses bad input with the reason (400), a viewer (403) and a console
without Alertmanager (409), each audited. Silences through a real Alertmanager:
tests/monitoring/test_alertmanager_silences.py.
"""

from __future__ import annotations

import json

import pytest

from console.models import AlertmanagerAlert
from tables.models import AuditEntry
from tests.accounts import grant
from tests.console import mirror_factory as mf

pytestmark = pytest.mark.django_db

TOKEN = "test-webhook-token"
URL = "/api/v1/alerts/webhook"


@pytest.fixture(autouse=True)
def webhook_token(settings):
    settings.ALERT_WEBHOOK_TOKEN = TOKEN
    settings.ALERTMANAGER_URL = ""


@pytest.fixture
def viewer(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("vera", password=None))
    return client


@pytest.fixture
def operator(client, django_user_model):
    client.force_login(
        grant(django_user_model.objects.create_user("otto", password=None), "operator")
    )
    return client


def alert(status: str = "firing", name: str = "PinotIngestionStalled", **labels: str) -> dict:
    labels = {"alertname": name, "severity": "critical", "table": "events", **labels}
    return {
        "status": status,
        "labels": labels,
        "annotations": {
            "summary": f"{labels['table']} partition {labels.get('partition', '?')} stalled",
            "runbook": "check the servers consuming it",
            "console_url": "http://127.0.0.1:8000/ui/tables/events_REALTIME/",
        },
        "startsAt": "2026-11-26T10:00:00.000Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-26T10:05:00Z",
        "generatorURL": "http://127.0.0.1:9090/graph?g0.expr=x",
        "fingerprint": "fp-" + "-".join(f"{k}={v}" for k, v in sorted(labels.items()))[:60],
    }


def notification(*alerts: dict) -> dict:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="PinotIngestionStalled", table="events"}',
        "truncatedAlerts": 0,
        "status": alerts[0]["status"] if alerts else "firing",
        "receiver": "console",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
        "alerts": list(alerts),
    }


def post(client, body, token: str | None = TOKEN):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **headers)


def test_the_webhook_needs_the_token(client, settings):
    body = notification(alert(partition="0"))
    assert post(client, body, token=None).status_code == 401
    wrong = post(client, body, token="not-the-token")
    assert wrong.status_code == 401 and "invalid" in wrong.json()["error"]
    settings.ALERT_WEBHOOK_TOKEN = ""
    off = post(client, body)
    assert off.status_code == 403 and "ALERT_WEBHOOK_TOKEN" in off.json()["error"]
    assert not AlertmanagerAlert.objects.exists()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "not JSON"),
        ([], "JSON object"),
        ({"version": "3", "alerts": []}, "version"),
        ({"alerts": "x"}, "'alerts' must be a list"),
        (notification({**alert(), "status": "pending"}), "status"),
        (notification({**alert(), "labels": {"severity": "critical"}}), "alertname"),
        (notification({**alert(), "labels": {"alertname": 3}}), "labels"),
        (notification({**alert(), "startsAt": "yesterday"}), "startsAt"),
        (notification({**alert(), "fingerprint": ""}), "fingerprint"),
    ],
)
def test_a_body_that_is_not_a_notification_is_400_with_the_reason(client, body, reason):
    response = post(client, body)
    assert response.status_code == 400
    assert reason in response.json()["error"]
    assert not AlertmanagerAlert.objects.exists()


def test_firing_then_resolved(client):
    p0, p1 = alert(partition="0"), alert(partition="1")
    response = post(client, notification(p0, p1))
    assert response.status_code == 200 and response.json() == {"firing": 2, "resolved": 0}
    stored = AlertmanagerAlert.objects.get(fingerprint=p0["fingerprint"])
    assert (stored.status, stored.table, stored.partition, stored.severity) == (
        "firing",
        "events",
        0,
        "critical",
    )
    assert stored.ends_at is None  # Go's zero time: no end yet
    assert post(client, notification(p0)).json() == {"firing": 1, "resolved": 0}  # a repeat
    assert AlertmanagerAlert.objects.filter(status="firing").count() == 2

    resolved = post(client, notification(alert("resolved", partition="0")))
    assert resolved.json() == {"firing": 0, "resolved": 1}
    assert set(AlertmanagerAlert.objects.values_list("partition", "status")) == {
        (0, "resolved"),
        (1, "firing"),
    }


def test_the_overview_and_the_table_page_show_the_firing_alerts(client, viewer):
    mf.mirror_state()
    mf.table("events")
    mf.table("other")
    post(
        client, notification(alert(partition="2"), alert(name="PinotControlPlaneAbsent", table=""))
    )
    post(
        client,
        notification(
            alert(name="PinotPartitionUnderReplicated", severity="warning", table="other")
        ),
    )

    overview = viewer.get("/").content.decode()
    assert 'id="alerts-table"' in overview
    for name in (
        "PinotIngestionStalled",
        "PinotControlPlaneAbsent",
        "PinotPartitionUnderReplicated",
    ):
        assert f'data-alert="{name}"' in overview
    assert "events partition 2 stalled" in overview and "Runbook: check the servers" in overview
    assert "Silence…" not in overview  # a viewer may not silence

    page = viewer.get("/ui/tables/events_REALTIME/").content.decode()
    assert 'data-alert="PinotIngestionStalled"' in page and 'data-partition="2"' in page
    assert "PinotPartitionUnderReplicated" not in page and "PinotControlPlaneAbsent" not in page

    post(client, notification(alert("resolved", partition="2")))
    page = viewer.get("/ui/tables/events_REALTIME/").content.decode()
    assert 'id="no-alerts"' in page and "PinotIngestionStalled" not in page


def test_operators_get_a_silence_form(client, operator):
    mf.mirror_state()
    firing = alert(partition="3")
    post(client, notification(firing))
    page = operator.get("/").content.decode()
    assert "Silence in Alertmanager" in page and f'value="{firing["fingerprint"]}"' in page


def silence(client, **fields):
    return client.post("/ui/alerts/silence/", {"next": "/", **fields})


def test_silences_are_refused_with_the_reason_and_audited(client, viewer, django_user_model):
    firing = alert(partition="0")
    post(client, notification(firing))
    fp = firing["fingerprint"]

    denied = silence(viewer, alert=fp, duration="1h", comment="maintenance")
    assert denied.status_code == 403 and "may not silence" in denied.content.decode()

    viewer.force_login(grant(django_user_model.objects.create_user("olga"), "operator"))
    cases = [
        ({"alert": "nope", "duration": "1h", "comment": "x"}, 404, "no alert"),
        ({"alert": fp, "duration": "forever", "comment": "x"}, 400, "not a positive period"),
        ({"alert": fp, "duration": "30d", "comment": "x"}, 400, "longer than 7 days"),
        ({"alert": fp, "duration": "1h", "comment": "  "}, 400, "comment is required"),
        ({"alert": fp, "duration": "1h", "comment": "maintenance"}, 409, "ALERTMANAGER_URL"),
    ]
    for fields, status, reason in cases:
        response = silence(viewer, **fields)
        assert response.status_code == status, fields
        assert reason in response.content.decode(), fields

    results = list(
        AuditEntry.objects.filter(action="silence_alert")
        .order_by("id")
        .values_list("result", "status_code")
    )
    assert results == [("DENIED", 403)] + [("REJECTED", status) for _f, status, _r in cases]


def test_labels_from_alertmanager_are_shown_escaped_and_never_break_the_page(client, viewer):
    mf.mirror_state()
    hostile = alert(table="a/b<script>x</script>", partition="9")
    assert post(client, notification(hostile)).status_code == 200
    page = viewer.get("/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<script>x</script>" not in html and "a/b&lt;script&gt;" in html
