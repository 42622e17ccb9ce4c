"""The console and a REAL Alertmanager (Debian's prometheus-alertmanager), on a private port.

The Alertmanager runs the shipped deploy/alertmanager/alertmanager.yml as `make demo` generates it
(scripts/alerting_config.py: the console's webhook URL and token file), with only the grouping
waits shortened, under var/test/slot-N. Alerts posted to its API v2 reach the console through the
webhook (Bearer token): firing ones show on the overview, a resolved one goes off. A silence made
with the console's form is active in Alertmanager with every label of the alert as matchers,
silences the alert there and is audited with its id. Alertmanager's own refusal is a 400 with its
message (its HTTP status named); an Alertmanager that cannot be reached is a 502 that says so,
audited as FAILED.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from console.alerting import silences
from console.models import AlertmanagerAlert
from scripts import alerting_config
from tables.models import AuditEntry
from tests import envdefaults
from tests.accounts import grant
from tests.console import mirror_factory as mf
from tests.ingest_cluster import free_port
from tests.poll import wait_until

BINARY = "/usr/bin/prometheus-alertmanager"
TOKEN = "alertmanager-test-token"
pytestmark = pytest.mark.django_db(transaction=True)


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def _post(url: str, body: object) -> None:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    urllib.request.urlopen(request, timeout=5).close()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.fixture
def alertmanager(live_server, settings) -> Iterator[str]:
    if not Path(BINARY).exists():
        pytest.fail(f"{BINARY} is not installed: scripts/bootstrap.sh installs it")
    port = free_port()
    home = envdefaults.VAR_DIR / f"alertmanager-{port}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    token_file = home / "webhook_token"
    token_file.write_text(TOKEN + "\n")
    config = home / "alertmanager.yml"
    config.write_text(
        yaml.safe_dump(
            alerting_config.quick_alertmanager_config(
                console_url=live_server.url, token_file=token_file, wait="1s"
            )
        )
    )
    url = f"http://127.0.0.1:{port}"
    command = [
        BINARY,
        f"--config.file={config}",
        f"--storage.path={home / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with (home / "alertmanager.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: process.poll() is not None or _ready(url), 30, 0.1, "Alertmanager ready")
        assert process.poll() is None, (home / "alertmanager.log").read_text()
        settings.ALERT_WEBHOOK_TOKEN = TOKEN
        settings.ALERTMANAGER_URL = url
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)


def _alert(partition: int, *, ends_in_s: float = 600) -> dict:
    now = dt.datetime.now(dt.UTC)
    return {
        "labels": {
            "alertname": "PinotIngestionStalled",
            "severity": "critical",
            "table": "events",
            "tableType": "REALTIME",
            "partition": str(partition),
        },
        "annotations": {"summary": f"events_REALTIME partition {partition}: ingestion stalled"},
        "startsAt": (now - dt.timedelta(minutes=3)).isoformat(),
        "endsAt": (now + dt.timedelta(seconds=ends_in_s)).isoformat(),
    }


def _stored(partition: int, status: str) -> AlertmanagerAlert | None:
    return AlertmanagerAlert.objects.filter(partition=partition, status=status).first()


def test_alerts_reach_the_console_and_a_silence_made_there_is_active_in_alertmanager(
    alertmanager, client, django_user_model
):
    mf.mirror_state()
    mf.table("events")
    _post(f"{alertmanager}/api/v2/alerts", [_alert(0), _alert(1)])
    wait_until(lambda: _stored(0, "firing") and _stored(1, "firing"), 30, 0.1, "webhook: firing")
    client.force_login(grant(django_user_model.objects.create_user("otto"), "operator"))
    assert "events_REALTIME partition 0: ingestion stalled" in client.get("/").content.decode()

    _post(f"{alertmanager}/api/v2/alerts", [_alert(1, ends_in_s=-1)])
    wait_until(lambda: _stored(1, "resolved"), 30, 0.1, "webhook: partition 1 resolved")

    fingerprint = _stored(0, "firing").fingerprint
    form = {"alert": fingerprint, "duration": "2h", "comment": "replacing the disk", "next": "/"}
    response = client.post("/ui/alerts/silence/", form)
    assert response.status_code == 302, response.content.decode()
    silence_id = response["Location"].split("silenced=")[1]

    found = _get(f"{alertmanager}/api/v2/silence/{silence_id}")
    assert found["status"]["state"] == "active"
    assert (found["createdBy"], found["comment"]) == ("otto", "replacing the disk")
    matchers = {m["name"]: m["value"] for m in found["matchers"]}
    assert matchers == _alert(0)["labels"]
    assert all(m["isEqual"] and not m["isRegex"] for m in found["matchers"])

    def silenced_in_alertmanager() -> bool:
        alerts = _get(f"{alertmanager}/api/v2/alerts?filter=partition%3D%220%22")
        return bool(alerts) and silence_id in alerts[0]["status"]["silencedBy"]

    wait_until(silenced_in_alertmanager, 30, 0.1, "the alert silenced in Alertmanager")
    entry = AuditEntry.objects.get(action="silence_alert")
    assert (entry.result, entry.username, entry.detail["silenceID"]) == ("OK", "otto", silence_id)
    assert "table=events" in entry.target and entry.reason == "replacing the disk"
    assert (
        f"Silence <code>{silence_id}</code> created"
        in client.get("/?silenced=" + silence_id).content.decode()
    )


def test_alertmanager_refusing_a_silence_is_a_400_with_its_message(alertmanager):
    now = dt.datetime.now(dt.UTC)
    bad = {
        "matchers": [],
        "startsAt": now.isoformat(),
        "endsAt": now.isoformat(),
        "createdBy": "t",
        "comment": "c",
    }
    with pytest.raises(silences.Refused) as refused:
        silences.post_silence(alertmanager, bad, 5)
    assert refused.value.status == 400
    assert "Alertmanager refused the silence (HTTP 422)" in refused.value.reason
    assert "matchers in body should have at least 1 items" in refused.value.reason


def test_an_unreachable_alertmanager_is_a_502_that_says_so(client, django_user_model, settings):
    settings.ALERT_WEBHOOK_TOKEN = TOKEN
    nowhere = f"http://127.0.0.1:{free_port()}"
    settings.ALERTMANAGER_URL = nowhere
    body = {
        "version": "4",
        "receiver": "console",
        "alerts": [{**_alert(0), "status": "firing", "fingerprint": "abc123"}],
    }
    client.post(
        "/api/v1/alerts/webhook",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
    )
    client.force_login(grant(django_user_model.objects.create_user("otto"), "operator"))
    form = {"alert": "abc123", "duration": "1h", "comment": "maintenance", "next": "/"}
    response = client.post("/ui/alerts/silence/", form)
    assert response.status_code == 502
    assert f"Alertmanager at {nowhere} cannot be reached" in response.content.decode()
    entry = AuditEntry.objects.get(action="silence_alert")
    assert (entry.result, entry.status_code) == ("FAILED", 502)
