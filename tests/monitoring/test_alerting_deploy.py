"""deploy/alertmanager/alertmanager.yml and the configurations `make demo` generates from the
shipped ones (scripts/alerting_config.py): amtool and promtool accept them; the shipped
Alertmanager groups by alert and table, routes by severity and posts to the console's webhook
with a Bearer token from a file; the generated copies carry the run's ports, the console's URL,
the token file and the shipped rules file itself (not a copy)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from scripts import alerting_config
from tests import envdefaults

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SHIPPED = DEPLOY / "alertmanager" / "alertmanager.yml"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: scripts/bootstrap.sh installs it")
    return path


def _check(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_shipped_alertmanager_config_routes_by_severity_and_groups_by_table() -> None:
    _check(_tool("amtool"), "check-config", str(SHIPPED))
    config = yaml.safe_load(SHIPPED.read_text())
    route = config["route"]
    assert route["group_by"] == ["alertname", "table"]
    assert [r["matchers"] for r in route["routes"]] == [
        ['severity="critical"'],
        ['severity="warning"'],
    ]
    (receiver,) = config["receivers"]
    (hook,) = receiver["webhook_configs"]
    assert hook["url"].endswith("/api/v1/alerts/webhook") and hook["send_resolved"] is True
    assert hook["http_config"]["authorization"]["type"] == "Bearer"
    assert "credentials_file" in hook["http_config"]["authorization"]


def test_the_demo_configs_are_the_shipped_ones_with_the_run_s_addresses() -> None:
    out = envdefaults.VAR_DIR / "alerting-config-test"
    shutil.rmtree(out, ignore_errors=True)
    token = out / "token"
    prometheus, alertmanager = alerting_config.render(
        out,
        web_port=18000,
        controller_ports=[19000, 19001],
        server_ports=[18098, 18099],
        alertmanager_port=19193,
        token_file=token,
    )
    _check(_tool("promtool"), "check", "config", str(prometheus))
    _check(_tool("amtool"), "check-config", str(alertmanager))

    prom = yaml.safe_load(prometheus.read_text())
    assert prom["rule_files"] == [str(DEPLOY / "prometheus" / "alerts.yml")]
    assert prom["global"]["external_labels"]["console_url"] == "http://127.0.0.1:18000"
    assert prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "127.0.0.1:19193"
    ]
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom["scrape_configs"]}
    assert targets == {
        "pinot-controller": ["127.0.0.1:19000", "127.0.0.1:19001"],
        "pinot-web": ["127.0.0.1:18000"],
        "pinot-server": ["127.0.0.1:18098", "127.0.0.1:18099"],
    }

    am = yaml.safe_load(alertmanager.read_text())
    shipped = yaml.safe_load(SHIPPED.read_text())
    assert am["route"] == shipped["route"] and am["inhibit_rules"] == shipped["inhibit_rules"]
    hook = am["receivers"][0]["webhook_configs"][0]
    assert hook["url"] == "http://127.0.0.1:18000/api/v1/alerts/webhook"
    assert hook["http_config"]["authorization"]["credentials_file"] == str(token.resolve())
    shutil.rmtree(out, ignore_errors=True)


def test_the_tests_copy_of_the_rules_only_shortens_durations() -> None:
    out = envdefaults.VAR_DIR / "alerting-rules-test"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    copy = alerting_config.shortened_rules(out / "alerts.yml", "10s", {"5m": "20s"})
    _check(_tool("promtool"), "check", "rules", str(copy))
    shipped = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    short = yaml.safe_load(copy.read_text())
    pairs = [
        (a, b)
        for g, h in zip(shipped["groups"], short["groups"], strict=True)
        for a, b in zip(g["rules"], h["rules"], strict=True)
    ]
    for rule, copied in pairs:
        assert copied.get("for") == ("10s" if "for" in rule else None)
        assert copied["expr"] == rule["expr"].replace("[5m]", "[20s]")
        assert {k: v for k, v in copied.items() if k not in ("for", "expr")} == {
            k: v for k, v in rule.items() if k not in ("for", "expr")
        }
    assert any("[20s]" in copied["expr"] for _rule, copied in pairs)
    shutil.rmtree(out, ignore_errors=True)
