"""Alerting end to end: a real Prometheus and Alertmanager (Debian's) on a real stack.

A controller, the web (gunicorn: console, /metrics, the alert webhook), three servers and the
mirror sync run as processes on a table with replication 2. Prometheus scrapes them with the
configuration `make demo` generates from the shipped deploy/prometheus/prometheus.yml
(scripts/alerting_config.py), evaluating every 2 s a copy of the shipped alerts.yml whose `for:`
durations are 10 s (generated, never written twice); Alertmanager runs the generated
deploy/alertmanager/alertmanager.yml with 1 s grouping waits, posting to the web's webhook with
its token.

Faults, one after the other on one stack:
- One server frozen (SIGSTOP) until its ZooKeeper session expires: PinotPartitionUnderReplicated
  fires in Alertmanager, reaches the console through the webhook and shows on its overview;
  thawed, the server comes back and the alert resolves in Alertmanager and in the console.
- Partition 0 paused (its CONSUMING segment commits, no next one): the paused gauge rises and
  PinotPartitionPausedTooLong fires, while PinotMissingConsumingSegment stays silent although the
  partition has had no CONSUMING segment for longer than the rule's `for:`; resumed, the alert
  resolves.
- The only controller frozen until its session expires: PinotNoLeadController fires (the web's
  /metrics reads leadership from ZooKeeper) and shows in the console; thawed, it resolves.
- The controller and the web stopped (SIGTERM): PinotControlPlaneAbsent (critical) fires in
  Alertmanager (the console is down with them, so only there) and resolves once they are back.
Not covered yet (issue 21): stalled ingestion while the producer writes (a consumer held by
fault injection does not refresh the stream's latest offset, so the upstream gauge stands still
too), the frozen controller's ingestion stall, and the dashboard's panels.
"""

from __future__ import annotations

import glob
import json
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from console.models import AlertmanagerAlert
from scripts import alerting_config
from tables.cluster import context
from tables.controller.pause import PauseManager
from tables.controller.resources import ResourceManager
from tests import envdefaults
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, load
from tests.e2e.console_stack import ConsoleStack
from tests.ingest_cluster import free_port, table_config
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
TOKEN = "e2e-alert-webhook-token"
RAW = "githubEvents"
ALERT = "PinotPartitionUnderReplicated"
ABSENT = "PinotControlPlaneAbsent"
LEADERLESS = "PinotNoLeadController"
CONTROLLER_ENV = {"ALERT_WEBHOOK_TOKEN": TOKEN}
TABLE = f"{RAW}_REALTIME"
PAUSED_ALERT = "PinotPartitionPausedTooLong"
MISSING_ALERT = "PinotMissingConsumingSegment"
PAUSED = f'max(pinot_console_partition_paused{{table="{RAW}",partition="0"}})'
MISSING_FOR_20S = (
    "min_over_time(max(pinot_controller_missingConsumingSegmentTotalCount_Value"
    f'{{table="{RAW}"}})[20s:2s])'
)
SERVERS = 3


def _live(zk) -> set[str]:
    return set(zk.get_children(PATHS.liveinstances)) if zk.exists(PATHS.liveinstances) else set()


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


class AlertingStack(ConsoleStack):
    """The console stack plus a web process (gunicorn, as `make demo` runs it): the console,
    its /metrics and the alert webhook stay up while the controller is frozen."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.web_port = free_port()
        self.web_url = f"http://127.0.0.1:{self.web_port}"

    def start_web(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        bind = f"127.0.0.1:{self.web_port}"
        command = [sys.executable, "-m", "gunicorn", "console.wsgi", "--bind", bind]
        with (self.log_dir / f"{self.log_prefix}-web.log").open("ab") as log:
            self.procs["web"] = subprocess.Popen(
                [*command, "--workers", "1", "--timeout", "60"],
                cwd=envdefaults.ROOT,
                env={**self._env(), **CONTROLLER_ENV},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def web_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.web_url}/login/", timeout=5) as reply:
                return reply.status == 200
        except OSError:
            return False


class Alerting:
    """Prometheus and Alertmanager on free ports under var/test/slot-N, on generated configs."""

    def __init__(self, stack: AlertingStack, home: Path) -> None:
        self.home = home
        self.prometheus_port, self.alertmanager_port = free_port(), free_port()
        self.prometheus = f"http://127.0.0.1:{self.prometheus_port}"
        self.alertmanager = f"http://127.0.0.1:{self.alertmanager_port}"
        self.procs: list[subprocess.Popen] = []
        token = home / "webhook_token"
        token.write_text(TOKEN + "\n")
        rules = alerting_config.shortened_rules(home / "alerts.yml", "10s")
        config = alerting_config.prometheus_config(
            web_port=stack.web_port,
            controller_ports=[stack.controller_port],
            server_ports=[stack.server_ports[f"server{i}"] for i in range(SERVERS)],
            alertmanager_port=self.alertmanager_port,
            rules=rules,
            interval="2s",
        )
        (home / "prometheus.yml").write_text(yaml.safe_dump(config))
        am = alerting_config.quick_alertmanager_config(
            console_url=stack.web_url, token_file=token, wait="1s"
        )
        (home / "alertmanager.yml").write_text(yaml.safe_dump(am))

    def _spawn(self, name: str, command: list[str]) -> None:
        with (self.home / f"{name}.log").open("wb") as log:
            self.procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))

    def start(self) -> None:
        self._spawn(
            "alertmanager",
            [
                ALERTMANAGER,
                f"--config.file={self.home / 'alertmanager.yml'}",
                f"--storage.path={self.home / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{self.alertmanager_port}",
                "--cluster.listen-address=",
            ],
        )
        self._spawn(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={self.home / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.home / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
            ],
        )
        for url in (self.alertmanager, self.prometheus):
            wait_until(lambda u=url: _ready(u), 60, 0.2, f"{url} ready")

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=30)

    def query(self, expr: str) -> list[dict]:
        q = urllib.parse.urlencode({"query": expr})
        return _get(f"{self.prometheus}/api/v1/query?{q}")["data"]["result"]

    def active(self, alertname: str) -> list[dict]:
        """The alerts of that name Alertmanager holds as active (not silenced, not resolved)."""
        q = urllib.parse.urlencode({"filter": f'alertname="{alertname}"', "active": "true"})
        found = _get(f"{self.alertmanager}/api/v2/alerts?{q}")
        return [a for a in found if a["status"]["state"] == "active"]


@pytest.fixture
def alerting_stack(
    worker_zk, celery_workers, topic, tmp_path, request
) -> Iterator[tuple[AlertingStack, Alerting]]:
    for tool in (PROMETHEUS, ALERTMANAGER):
        if not Path(tool).exists():
            pytest.fail(f"{tool} is not installed: scripts/bootstrap.sh installs it")
    stack = AlertingStack(celery_workers.zk_hosts, tmp_path / "servers", request.node.name)
    for old in stack.log_dir.glob(f"{glob.escape(request.node.name)}-*.log"):
        old.unlink()
    home = envdefaults.VAR_DIR / f"alerting-e2e-{free_port()}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    alerting = None
    try:
        stack.start_controller(env=CONTROLLER_ENV)
        for index in range(SERVERS):
            stack.start_server(index)
        wanted = {stack.controller_id, *(stack.server_id(i) for i in range(SERVERS))}
        wait_until(lambda: wanted <= _live(worker_zk), 90, what="controller and 3 servers live")
        wait_until(stack.serves_pages, 60, what="the controller serving pages")
        stack.start_web()
        wait_until(stack.web_answers, 60, what="the web serving pages")
        stack.start_mirror_sync(every=1.0)
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        manager.add_table(table_config(topic))
        alerting = Alerting(stack, home)
        alerting.start()
        yield stack, alerting
    finally:
        if alerting is not None:
            alerting.stop()
        for proc in stack.procs.values():  # a SIGSTOPped one must be able to stop
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        stack.stop()
        shutil.rmtree(home, ignore_errors=True)


def _fully_replicated(alerting: Alerting) -> bool:
    found = alerting.query(
        f'min(pinot_console_partition_replicas_up{{table="{RAW}"}}'
        f' - pinot_console_partition_replicas_expected{{table="{RAW}"}})'
    )
    return bool(found) and float(found[0]["value"][1]) == 0


def _value(alerting: Alerting, expr: str) -> float | None:
    found = alerting.query(expr)
    return float(found[0]["value"][1]) if found else None


def _in_console(status: str, alertname: str = ALERT, table: str = RAW) -> bool:
    found = AlertmanagerAlert.objects.filter(alertname=alertname, table=table, status=status)
    return found.exists()


def test_faults_fire_alerts_in_alertmanager_and_the_console_then_resolve(
    alerting_stack, client, django_user_model
):
    stack, alerting = alerting_stack
    wait_until(lambda: _fully_replicated(alerting), 180, 1, "every partition fully replicated")
    assert alerting.active(ALERT) == [] and not _in_console("firing")

    frozen = stack.procs["server0"]
    frozen.send_signal(signal.SIGSTOP)
    try:
        firing = wait_until(lambda: alerting.active(ALERT), 240, 1, f"{ALERT} in Alertmanager")
        assert {a["labels"]["table"] for a in firing} == {RAW}
        assert all(a["labels"]["severity"] == "warning" for a in firing)
        assert all(
            f"/ui/tables/{RAW}_REALTIME/partitions/" in a["annotations"]["console_url"]
            for a in firing
        )
        wait_until(lambda: _in_console("firing"), 60, 0.5, f"{ALERT} firing in the console")
        client.force_login(grant(django_user_model.objects.create_user("vera"), "viewer"))
        overview = client.get("/").content.decode()
        assert f'data-alert="{ALERT}"' in overview and f'data-table="{RAW}"' in overview
    finally:
        frozen.send_signal(signal.SIGCONT)

    wait_until(lambda: not alerting.active(ALERT), 240, 1, f"{ALERT} resolved in Alertmanager")
    wait_until(
        lambda: _in_console("resolved") and not _in_console("firing"),
        60,
        0.5,
        f"{ALERT} resolved in the console",
    )

    # A partition paused: its CONSUMING segment commits and no next one is made. The paused gauge
    # rises and PinotPartitionPausedTooLong fires; the partition counts as missing its CONSUMING
    # segment for longer than the rule's `for:`, and PinotMissingConsumingSegment never fires.
    pauses = PauseManager(context.current())
    pauses.pause(TABLE, comment="alerting e2e", partitions="0")
    wait_until(lambda: _value(alerting, PAUSED) == 1, 60, 1, "the paused gauge of partition 0")
    wait_until(lambda: alerting.active(PAUSED_ALERT), 120, 1, f"{PAUSED_ALERT} in Alertmanager")
    wait_until(lambda: _value(alerting, MISSING_FOR_20S) >= 1, 400, 1, "missing CONSUMING for 20 s")
    assert alerting.query(f'ALERTS{{alertname="{MISSING_ALERT}"}}') == []
    assert alerting.active(MISSING_ALERT) == []
    pauses.resume(TABLE, partitions="0")
    wait_until(lambda: _value(alerting, PAUSED) == 0, 60, 1, "the paused gauge back to 0")
    wait_until(lambda: not alerting.active(PAUSED_ALERT), 120, 1, f"{PAUSED_ALERT} resolved")

    # The only controller frozen until its session expires: its leadControllerResource partitions
    # have no MASTER (read from ZooKeeper by the web's /metrics); the console hears of it.
    controller = stack.procs["controller"]
    controller.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: alerting.active(LEADERLESS), 180, 1, f"{LEADERLESS} in Alertmanager")
        wait_until(lambda: _in_console("firing", LEADERLESS, ""), 60, 0.5, f"{LEADERLESS} shown")
    finally:
        controller.send_signal(signal.SIGCONT)
    wait_until(lambda: not alerting.active(LEADERLESS), 180, 1, f"{LEADERLESS} resolved")
    wait_until(lambda: _in_console("resolved", LEADERLESS, ""), 60, 0.5, f"{LEADERLESS} resolved")

    # The whole control plane stopped: the controller and the web.
    stack.kill("controller", signal.SIGTERM)
    stack.kill("web", signal.SIGTERM)
    absent = wait_until(lambda: alerting.active(ABSENT), 120, 1, f"{ABSENT} in Alertmanager")
    assert [a["labels"]["severity"] for a in absent] == ["critical"]
    stack.start_controller(env=CONTROLLER_ENV)
    stack.start_web()
    wait_until(lambda: not alerting.active(ABSENT), 120, 1, f"{ABSENT} resolved in Alertmanager")
