"""The processes of the alerting end-to-end test (tests/e2e/test_alerting.py) and its readings.

- `AlertingStack`: `ConsoleStack` (a controller, servers, the mirror sync) plus the web as
  `make demo` runs it (gunicorn: the console, /metrics, the alert webhook), with the servers'
  fault-injection directory: `hold_consumers()` creates `server.<instanceId>.consumer_holds` for
  every server (no consumer fetches; the upstream offset is still refreshed), `release_consumers()`
  removes them.
- `Alerting`: Prometheus and Alertmanager (Debian's binaries) on free ports, on configurations
  generated from the shipped ones by `scripts.alerting_config`: scrape and evaluation every 2 s,
  every `for:` 10 s and the 5 m range windows 20 s in the rules' copy (`rules`: by alert name),
  1 s grouping waits. Queries (instant and range), Alertmanager's active alerts, Prometheus's
  `activeAt` of an alert and a label's values.
- `FiringFigures`: per fault, the time from the fault to the rule's condition holding (the alert's
  `activeAt`), with the shipped `for:` and Alertmanager `group_wait` beside it, and other
  figures of the run (`note`); written to a text file, asserted on by nobody.
- `dashboard_targets(path, values)`: every panel target expression of a Grafana dashboard with its
  template variables replaced; an unknown variable raises KeyError.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

import yaml

from scripts import alerting_config
from tests import envdefaults
from tests.e2e.console_stack import ConsoleStack
from tests.ingest_cluster import free_port
from tests.poll import wait_until

__all__ = [
    "ALERTMANAGER",
    "PROMETHEUS",
    "SERVERS",
    "TOKEN",
    "Alerting",
    "AlertingStack",
    "FiringFigures",
    "dashboard_targets",
]

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
TOKEN = "e2e-alert-webhook-token"
CONTROLLER_ENV = {"ALERT_WEBHOOK_TOKEN": TOKEN}
SERVERS = 3
INTERVAL = "2s"  # scrape and evaluation
FOR = "10s"
RANGES = {"5m": "20s"}
VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")  # not label_replace's "$1"


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def _seconds(duration: str) -> float:
    """A Prometheus duration of one unit ("10s", "5m", "2h") in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h|d)", duration).groups()
    return int(number) * units[unit]


class AlertingStack(ConsoleStack):
    """The console stack plus a web process (gunicorn, as `make demo` runs it): the console,
    its /metrics and the alert webhook stay up while the controller is frozen."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.web_port = free_port()
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.faults = Path(str(self.data_dir)) / "faults"
        self.faults.mkdir(parents=True, exist_ok=True)

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "FAULT_INJECTION_DIR": str(self.faults)}

    def start_controller(
        self, index: int = 0, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        return super().start_controller(index, {**CONTROLLER_ENV, **(env or {})})

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

    def _holds(self) -> list[Path]:
        return [self.faults / f"server.{self.server_id(i)}.consumer_holds" for i in range(SERVERS)]

    def hold_consumers(self) -> None:
        for hold in self._holds():
            hold.write_text("alerting e2e\n")

    def release_consumers(self) -> None:
        for hold in self._holds():
            hold.unlink(missing_ok=True)

    def thaw_all(self) -> None:
        """SIGCONT every running process (a SIGSTOPped one must be able to stop)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)


class Alerting:
    """Prometheus and Alertmanager on free ports under `home`, on generated configs."""

    def __init__(self, stack: AlertingStack, home: Path) -> None:
        self.home = home
        self.prometheus_port, self.alertmanager_port = free_port(), free_port()
        self.prometheus = f"http://127.0.0.1:{self.prometheus_port}"
        self.alertmanager = f"http://127.0.0.1:{self.alertmanager_port}"
        self.procs: list[subprocess.Popen] = []
        token = home / "webhook_token"
        token.write_text(TOKEN + "\n")
        rules = alerting_config.shortened_rules(home / "alerts.yml", FOR, ranges=RANGES)
        groups = yaml.safe_load(rules.read_text())["groups"]
        self.rules = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
        config = alerting_config.prometheus_config(
            web_port=stack.web_port,
            controller_ports=[stack.controller_port],
            server_ports=[stack.server_ports[f"server{i}"] for i in range(SERVERS)],
            alertmanager_port=self.alertmanager_port,
            rules=rules,
            interval=INTERVAL,
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

    def value(self, expr: str) -> float | None:
        """The first series' value of an instant query, None when it has none."""
        found = self.query(expr)
        return float(found[0]["value"][1]) if found else None

    def query_range(self, expr: str, start: float, end: float, step: str = INTERVAL) -> list[dict]:
        q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
        return _get(f"{self.prometheus}/api/v1/query_range?{q}")["data"]["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        q = urllib.parse.urlencode({"match[]": match})
        return _get(f"{self.prometheus}/api/v1/label/{label}/values?{q}")["data"]

    def active(self, alertname: str) -> list[dict]:
        """The alerts of that name Alertmanager holds as active (not silenced, not resolved)."""
        q = urllib.parse.urlencode({"filter": f'alertname="{alertname}"', "active": "true"})
        found = _get(f"{self.alertmanager}/api/v2/alerts?{q}")
        return [a for a in found if a["status"]["state"] == "active"]

    def active_at(self, alertname: str) -> float | None:
        """When Prometheus first saw the rule's condition hold (the earliest `activeAt` of its
        pending or firing alerts), epoch seconds; None when it has none."""
        alerts = _get(f"{self.prometheus}/api/v1/alerts")["data"]["alerts"]
        stamps = [
            datetime.fromisoformat(a["activeAt"].replace("Z", "+00:00")).timestamp()
            for a in alerts
            if a["labels"].get("alertname") == alertname
        ]
        return min(stamps) if stamps else None


class FiringFigures:
    """Fault-to-condition times, with the shipped `for:` and group_wait (see the docstring)."""

    def __init__(self) -> None:
        rules = yaml.safe_load(alerting_config.ALERTS_YML.read_text())
        self.rules = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
        route = yaml.safe_load(alerting_config.ALERTMANAGER_YML.read_text())["route"]
        self.group_wait = {"": route["group_wait"]}
        for sub in route.get("routes", []):
            severity = re.search(r'severity="(\w+)"', sub["matchers"][0]).group(1)
            self.group_wait[severity] = sub.get("group_wait", route["group_wait"])
        self.lines: list[str] = []

    def record(self, fault: str, alertname: str, started: float, alerting: Alerting) -> None:
        """One line: `fault` started at `started` (epoch s); `alertname` is pending or firing."""
        active_at = wait_until(lambda: alerting.active_at(alertname), 30, 1, f"{alertname} active")
        rule = self.rules[alertname]
        held = shipped_held = active_at - started
        note = "test windows"
        for shipped, short in RANGES.items():
            if f"[{shipped}]" in rule["expr"]:  # a flat offset must fill the whole window
                shipped_held += _seconds(shipped) - _seconds(short)
                note = f"[{short}] windows; with the shipped [{shipped}] about {shipped_held:.0f} s"
        for_, severity = rule.get("for", "0s"), rule["labels"]["severity"]
        wait = self.group_wait.get(severity, self.group_wait[""])
        total = shipped_held + _seconds(for_) + _seconds(wait)
        self.lines.append(
            f"{fault}: {alertname} condition held after {held:.1f} s ({note})"
            f" + shipped for: {for_} + group_wait {wait} ({severity}) = {total:.0f} s"
        )

    def note(self, line: str) -> None:
        self.lines.append(line)

    def write(self, path: Path) -> str:
        head = (
            "Fault to notification with the shipped durations (tests/e2e/test_alerting.py): the\n"
            "time from the fault to the rule's condition holding (the alert's activeAt), measured\n"
            "with a 2 s scrape and evaluation interval and the default 5 s ZooKeeper session\n"
            "timeout, plus the shipped for: and Alertmanager group_wait. The shipped 15 s scrape\n"
            "and evaluation intervals add up to about 30 s more.\n"
        )
        text = head + "\n".join(self.lines) + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return text


def dashboard_targets(path: Path, values: dict[str, str]) -> list[tuple[str, str]]:
    """(panel title, expression) of every target of every panel, rows' nested panels included,
    with `$name` and `${name}` replaced from `values`; KeyError names an unknown variable."""
    dashboard = json.loads(path.read_text())
    panels = list(dashboard["panels"])
    found = []
    while panels:
        panel = panels.pop(0)
        panels.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            expr = VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], target["expr"])
            found.append((panel["title"], expr))
    return found
