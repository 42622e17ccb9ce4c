"""The Prometheus and Grafana files of deploy/ against what /metrics exports: promtool checks the
scrape config and the alert rules and runs the rules' unit tests (alerts_test.yml: every alert,
the paused-partition exceptions), every alert and dashboard query names only families this
project exports, every alert has a severity, a runbook line and a console deep link, and the
dashboard's queries parse as PromQL and use the truthful families."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest

from monitoring.server_metrics import server_registry
from tables.server.consumer import PartitionStats
from tests.monitoring.test_controller_metrics import (
    cluster_mirror,  # noqa: F401 - the fixture
    mirror_leadership,  # noqa: F401 - the autouse fixture: leadership from the mirror only
    promtool,
    scrape,
    types,
)

pytestmark = pytest.mark.django_db

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_promtool_accepts_the_scrape_config_and_the_alert_rules() -> None:
    for args in (
        ["check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
        ["check", "rules", str(DEPLOY / "prometheus" / "alerts.yml")],
        # Alert unit tests: firing after `for`, one alert per table / partition whichever
        # targets answered, paused tables exempt from lag alerts, the rendered console links.
        ["test", "rules", str(DEPLOY / "prometheus" / "alerts_test.yml")],
    ):
        result = subprocess.run(
            [promtool(), *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


def emitted_families(controller_text: str) -> set[str]:
    """Every family name this project exports: the controller's and a server's."""
    stats = PartitionStats("githubEvents_REALTIME", "githubEvents", 0, rows_consumed=10)
    instance = SimpleNamespace(
        stats={("githubEvents_REALTIME", 0): stats},
        committer=SimpleNamespace(build_failures={}),
        client=SimpleNamespace(responses={"HOLD": 1, "COMMIT_SUCCESS": 1, "NOT_LEADER": 1}),
        hosted_tables=list,  # no replica: the families are there, without samples
        replicas_of=lambda table: None,
    )
    server_text = generate_latest(server_registry(instance)).decode()  # type: ignore[arg-type]
    return set(types(controller_text)) | set(types(server_text))


def metric_references(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, regexes over metric names) an expression mentions."""
    patterns = set()
    for quoted in re.findall(r'"([^"]*)"', expr):
        if quoted.startswith("pinot_") and re.search(r"[.*+()\[\]|]", quoted):
            patterns.add(quoted)
    bare = re.sub(r'"[^"]*"', '""', expr)
    return set(re.findall(r"\bpinot_\w+", bare)), patterns


def check_references(exprs: list[str], families: set[str]) -> None:
    for expr in exprs:
        names, patterns = metric_references(expr)
        assert names or patterns, f"no pinot metric in {expr!r}"
        assert names <= families, (sorted(names - families), expr)
        for pattern in patterns:
            assert any(re.fullmatch(pattern, f) for f in families), (pattern, expr)


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = []
    stack = list(dashboard["panels"])
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels", []))
        exprs.extend(target["expr"] for target in panel.get("targets", []))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(variable["query"]["query"])
    return exprs


@pytest.mark.usefixtures("cluster_mirror")
def test_the_grafana_dashboard_queries_only_metrics_we_export(client) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "pinot-realtime.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    exprs = dashboard_exprs(dashboard)
    families = emitted_families(scrape(client))
    check_references(exprs, families)
    for wanted in (
        # Each row once (the most advanced replica's offset), beside each replica's consumption.
        "sum by (table) (max by (table, partition) (rate(pinot_console_partition_consumed_offset",
        "pinot_console_partition_upstream_offset",
        "pinot_console_partition_replicas_up",
        "pinot_console_partition_replicas_expected",
        "pinot_console_paused_partitions",
        "pinot_console_partition_paused",
        "pinot_console_servers_live",
        "pinot_console_servers_needed",
        "pinot_server_realtimeRowsConsumed_Count",
        "pinot_controller_maxRecordsLag_Value",
        "pinot_controller_maxRecordAvailabilityLagMs_Value",
        "pinot_controller_segmentsInErrorState_Value",
        "pinot_controller_percentSegmentsAvailable_Value",
        "pinot_controller_tableConsumptionPaused_Value",
        "pinot_controller_missingConsumingSegmentTotalCount_Value",
        "pinot_server_llcControllerResponse",
        "pinot_console_mirror_age_seconds",
    ):
        assert any(wanted in expr for expr in exprs), wanted
    stack = list(dashboard["panels"])
    while stack:
        panel = stack.pop()
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_dashboard_queries_are_valid_promql(tmp_path) -> None:
    """promtool parses each dashboard query (Grafana's variables replaced) as a recording rule."""
    dashboard = json.loads((DEPLOY / "grafana" / "pinot-realtime.json").read_text())
    rules = []
    for i, expr in enumerate(dashboard_exprs(dashboard)):
        if expr.startswith("label_values("):
            continue  # a Grafana function, not PromQL
        expr = expr.replace("$__rate_interval", "5m").replace("$table", ".*")
        rules.append({"record": f"dashboard:query{i}", "expr": expr})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.usefixtures("cluster_mirror")
def test_every_alert_uses_our_metrics_and_links_into_the_console(client) -> None:
    import yaml

    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    families = emitted_families(scrape(client))
    check_references([a["expr"] for a in alerts if "pinot_" in a["expr"]], families)
    # Every alert is unit-tested in alerts_test.yml.
    tests = yaml.safe_load((DEPLOY / "prometheus" / "alerts_test.yml").read_text())
    tested = {
        case["alertname"] for test in tests["tests"] for case in test.get("alert_rule_test", [])
    }
    assert {a["alert"] for a in alerts} - tested == set()
    for alert in alerts:
        assert alert["labels"]["severity"] in ("critical", "warning"), alert["alert"]
        assert len(alert["annotations"]["runbook"]) > 30, alert["alert"]
        link = alert["annotations"]["console_url"]
        assert link.startswith("{{ $externalLabels.console_url }}/"), alert["alert"]
        if "partition" in alert["expr"] and "by (table, tableType, partition)" in alert["expr"]:
            assert "/partitions/{{ $labels.partition }}/" in link, alert["alert"]
        elif "by (table, tableType)" in alert["expr"]:
            assert "/ui/tables/{{ $labels.table }}_" in link or "/ui/errors/" in link
