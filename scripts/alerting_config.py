"""Prometheus and Alertmanager configurations for one run, generated from the shipped ones.

    python scripts/alerting_config.py OUT_DIR --web-port 8000 --controller-ports 9000,9001 \
        --server-ports 8098,8099,8100 --alertmanager-port 9093 --token-file var/alert_webhook_token

reads deploy/prometheus/prometheus.yml and deploy/alertmanager/alertmanager.yml and writes
OUT_DIR/prometheus.yml and OUT_DIR/alertmanager.yml: the same configuration with this run's
addresses (scrape targets per job, the console's URL for deep links and the webhook, the
Alertmanager target, the webhook's token file) and `rule_files` pointing at the shipped
alerts.yml (or at --rules, a test's copy), so nothing is written twice. `make demo`
(scripts/demo.sh) and the tests use it; `render(...)` is the same as a function. For tests,
`shortened_rules` copies the shipped rules with shorter `for:` durations (and range windows) and
`quick_alertmanager_config` shortens Alertmanager's grouping waits.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
ALERTMANAGER_YML = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
ALERTS_YML = ROOT / "deploy" / "prometheus" / "alerts.yml"
WEBHOOK_PATH = "/api/v1/alerts/webhook"


def _targets(ports: list[int]) -> list[str]:
    return [f"127.0.0.1:{port}" for port in ports]


def prometheus_config(
    *,
    web_port: int,
    controller_ports: list[int],
    server_ports: list[int],
    alertmanager_port: int,
    rules: Path = ALERTS_YML,
    interval: str | None = None,
) -> dict[str, Any]:
    """The shipped prometheus.yml with these ports (and, for tests, a shorter interval)."""
    config = copy.deepcopy(yaml.safe_load(PROMETHEUS_YML.read_text()))
    config["global"]["external_labels"]["console_url"] = f"http://127.0.0.1:{web_port}"
    if interval:
        config["global"]["scrape_interval"] = config["global"]["evaluation_interval"] = interval
    config["rule_files"] = [str(Path(rules).resolve())]
    config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = _targets(
        [alertmanager_port]
    )
    ports = {"pinot-controller": controller_ports, "pinot-web": [web_port]}
    ports["pinot-server"] = server_ports
    for job in config["scrape_configs"]:
        job["static_configs"][0]["targets"] = _targets(ports[job["job_name"]])
    return config


def alertmanager_config(*, console_url: str, token_file: Path) -> dict[str, Any]:
    """The shipped alertmanager.yml posting to the console at `console_url` with `token_file`."""
    config = copy.deepcopy(yaml.safe_load(ALERTMANAGER_YML.read_text()))
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = console_url.rstrip("/") + WEBHOOK_PATH
            hook["http_config"]["authorization"]["credentials_file"] = str(
                Path(token_file).resolve()
            )
    return config


def shortened_rules(out: Path, for_: str, ranges: dict[str, str] | None = None) -> Path:
    """For tests: a copy of the shipped alerts.yml at `out` with every `for:` set to `for_` and
    each range selector of `ranges` replaced in the expressions (e.g. {"5m": "20s"}: `[5m]`
    becomes `[20s]`); labels and annotations unchanged."""
    rules = yaml.safe_load(ALERTS_YML.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = for_
            for old, new in (ranges or {}).items():
                rule["expr"] = rule["expr"].replace(f"[{old}]", f"[{new}]")
    out.write_text(yaml.safe_dump(rules, sort_keys=False))
    return out


def quick_alertmanager_config(*, console_url: str, token_file: Path, wait: str) -> dict[str, Any]:
    """For tests: the generated alertmanager.yml with every group_wait and group_interval `wait`."""
    config = alertmanager_config(console_url=console_url, token_file=token_file)
    for route in [config["route"], *config["route"].get("routes", [])]:
        route.update(group_wait=wait, group_interval=wait)
    return config


def render(out_dir: Path, **kwargs: Any) -> tuple[Path, Path]:
    """Write OUT_DIR/prometheus.yml and OUT_DIR/alertmanager.yml; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    token_file = kwargs.pop("token_file")
    prometheus = out_dir / "prometheus.yml"
    alertmanager = out_dir / "alertmanager.yml"
    prometheus.write_text(yaml.safe_dump(prometheus_config(**kwargs), sort_keys=False))
    alertmanager.write_text(
        yaml.safe_dump(
            alertmanager_config(
                console_url=f"http://127.0.0.1:{kwargs['web_port']}", token_file=token_file
            ),
            sort_keys=False,
        )
    )
    return prometheus, alertmanager


def _ports(text: str) -> list[int]:
    return [int(port) for port in text.split(",") if port.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--web-port", type=int, required=True)
    parser.add_argument("--controller-ports", type=_ports, required=True)
    parser.add_argument("--server-ports", type=_ports, required=True)
    parser.add_argument("--alertmanager-port", type=int, required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--rules", type=Path, default=ALERTS_YML)
    args = parser.parse_args()
    render(
        args.out_dir,
        web_port=args.web_port,
        controller_ports=args.controller_ports,
        server_ports=args.server_ports,
        alertmanager_port=args.alertmanager_port,
        token_file=args.token_file,
        rules=args.rules,
    )


if __name__ == "__main__":
    main()
