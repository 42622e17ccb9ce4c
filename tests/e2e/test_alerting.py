"""Alerting end to end: a real Prometheus and Alertmanager (Debian's) on a real stack.

A controller, the web (gunicorn: console, /metrics, the alert webhook), three servers and the
mirror sync run as processes on a table with replication 2 (5,000-row segments, no time limit),
and a producer writes 100 rows/s into its topic until the last fault that needs rows. Prometheus
scrapes them with the configuration `make demo` generates from the shipped
deploy/prometheus/prometheus.yml (scripts/alerting_config.py), evaluating every 2 s a copy of the
shipped alerts.yml whose `for:` durations are 10 s and whose 5 m range windows are 20 s
(generated, never written twice); Alertmanager runs the generated
deploy/alertmanager/alertmanager.yml with 1 s grouping waits, posting to the web's webhook with
its token (tests/e2e/alerting_stack.py).

Faults, one after the other on one stack:
- One server frozen (SIGSTOP) until its ZooKeeper session expires: PinotPartitionUnderReplicated
  fires in Alertmanager, reaches the console through the webhook and shows on its overview.
  Meanwhile the dashboard's ingestion-rate panel (its expression from
  deploy/grafana/pinot-realtime.json, `$__rate_interval` 30 s) reads the producer's 100 rows/s
  within 10 %: each row counted once, whatever the replicas. Thawed, the server comes back and
  the alert resolves in Alertmanager and in the console.
- Every server's consumers held by fault injection (`server.<instanceId>.consumer_holds`: rows
  arrive, nothing is consumed) and partition 0 paused (its CONSUMING segment commits, no next
  one): the paused gauge rises and PinotPartitionPausedTooLong fires; PinotIngestionStalled
  (critical) fires for partitions 1-3 and never for partition 0, although its rows pile up for
  longer than the stall rule's window and `for:`; PinotMissingConsumingSegment stays silent
  although partition 0 has had no CONSUMING segment for longer than its `for:`. Released and
  resumed, both alerts resolve.
- The only controller frozen until its session expires, each partition's CONSUMING segment
  filled to its row limit (5,000 rows written to every partition, which the servers cannot commit
  without a controller): PinotNoLeadController fires (the web's /metrics reads leadership from
  ZooKeeper) and shows in the console, and PinotIngestionStalled fires for every partition while
  the producer writes; thawed, both resolve.
- The table paused (for the paused-table query of the dashboard), then the controller and the web
  stopped (SIGTERM): PinotControlPlaneAbsent (critical) fires in Alertmanager (the console is
  down with them, so only there) and resolves once they are back.
Then every target of every dashboard panel, its template variables replaced (`$table` by the
table the dashboard's own variable query finds, `$__rate_interval` 8 s as Grafana computes it for
a 2 s scrape interval), returns at least one series over the run. For each fault, the time from
the fault to the rule's condition holding (the alert's `activeAt`), with the shipped `for:` and
Alertmanager `group_wait`, goes to var/test[/slot-N]/artifacts/alerting-firing.txt (and stdout);
nothing asserts on times.
"""

from __future__ import annotations

import glob
import json
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from console.models import AlertmanagerAlert
from tables.cluster import context
from tables.controller.pause import PauseManager
from tables.controller.resources import ResourceManager
from tables.redisconn import get_redis
from tables.streams.producer import synthetic_rows
from tables.streams.redis_streams import RedisTopicAdmin
from tests import envdefaults
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, load
from tests.e2e.alerting_stack import (
    ALERTMANAGER,
    PROMETHEUS,
    SERVERS,
    Alerting,
    AlertingStack,
    FiringFigures,
    dashboard_targets,
)
from tests.ingest_cluster import free_port, produce, table_config
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
RAW = "githubEvents"
TABLE = f"{RAW}_REALTIME"
PARTITIONS = {"0", "1", "2", "3"}
SEGMENT_ROWS = 5000
ALERT = "PinotPartitionUnderReplicated"
ABSENT = "PinotControlPlaneAbsent"
LEADERLESS = "PinotNoLeadController"
STALLED = "PinotIngestionStalled"
PAUSED_ALERT = "PinotPartitionPausedTooLong"
MISSING_ALERT = "PinotMissingConsumingSegment"
PAUSED = f'max(pinot_console_partition_paused{{table="{RAW}",partition="0"}})'
MISSING_FOR_20S = (
    "min_over_time(max(pinot_controller_missingConsumingSegmentTotalCount_Value"
    f'{{table="{RAW}"}})[20s:2s])'
)
CONSUMED = f'sum(max by (partition) (pinot_console_partition_consumed_offset{{table="{RAW}"}}'
RATE = 100  # rows/s
RATE_WINDOW = 30  # s
DASHBOARD = envdefaults.ROOT / "deploy" / "grafana" / "pinot-realtime.json"
FIGURES = envdefaults.VAR_DIR / "artifacts" / "alerting-firing.txt"


def _live(zk) -> set[str]:
    return set(zk.get_children(PATHS.liveinstances)) if zk.exists(PATHS.liveinstances) else set()


@pytest.fixture
def alerting_stack(
    worker_zk, celery_workers, topic, tmp_path, request
) -> Iterator[tuple[AlertingStack, Alerting, str]]:
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
        stack.start_controller()
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
        limits = {"realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS)}
        limits["realtime.segment.flush.threshold.time"] = "6h"
        manager.add_table(table_config(topic, **limits))
        alerting = Alerting(stack, home)
        alerting.start()
        yield stack, alerting, topic
    finally:
        if alerting is not None:
            alerting.stop()
        stack.release_consumers()
        stack.thaw_all()
        stack.stop()
        shutil.rmtree(home, ignore_errors=True)


def _fully_replicated(alerting: Alerting) -> bool:
    found = alerting.value(
        f'min(pinot_console_partition_replicas_up{{table="{RAW}"}}'
        f' - pinot_console_partition_replicas_expected{{table="{RAW}"}})'
    )
    return found == 0


def _in_console(status: str, alertname: str = ALERT, table: str = RAW) -> bool:
    found = AlertmanagerAlert.objects.filter(alertname=alertname, table=table, status=status)
    return found.exists()


def _firing_on(alerting: Alerting, alertname: str, partitions: set[str]) -> list[dict]:
    """The alerts of `alertname` once they are active in Alertmanager for exactly `partitions`."""
    firing = alerting.active(alertname)
    return firing if {a["labels"].get("partition") for a in firing} == partitions else []


def _server_frozen(stack, alerting, figures, client, django_user_model, produced_from) -> None:
    """Under-replication fires and reaches the console; meanwhile the table still ingests the
    producer's rows once each, and the rate panel says so."""
    frozen = stack.procs["server0"]
    frozen.send_signal(signal.SIGSTOP)
    started = time.time()
    try:
        firing = wait_until(lambda: alerting.active(ALERT), 240, 1, f"{ALERT} in Alertmanager")
        figures.record("one server of three frozen", ALERT, started, alerting)
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
        _rate_panel_reads_the_producer(alerting, figures, produced_from)
    finally:
        frozen.send_signal(signal.SIGCONT)

    wait_until(lambda: not alerting.active(ALERT), 240, 1, f"{ALERT} resolved in Alertmanager")
    wait_until(
        lambda: _in_console("resolved") and not _in_console("firing"),
        60,
        0.5,
        f"{ALERT} resolved in the console",
    )


def _stall_held_without_its_exception(alerting: Alerting, partition: str) -> bool:
    """True once PinotIngestionStalled's condition, its paused-partition exception left out, has
    held on `partition` for longer than the rule's `for:` (rows arrive, none is consumed)."""
    condition = alerting.rules[STALLED]["expr"].split("unless on")[0]
    for series in alerting.query(f"count_over_time(({condition})[14s:2s])"):
        if series["metric"]["partition"] == partition and float(series["value"][1]) >= 7:
            return True
    return False


def _stalled_partitions(alerting: Alerting) -> set[str]:
    firing = alerting.query(f'ALERTS{{alertname="{STALLED}"}}')
    return {series["metric"]["partition"] for series in firing}


def _paused_while_consumers_held(stack, alerting: Alerting, figures: FiringFigures) -> None:
    """Every server's consumers held, partition 0 paused (its CONSUMING segment commits, no next
    one is made), the producer writing. The paused gauge rises and PinotPartitionPausedTooLong
    fires; PinotIngestionStalled fires for the three other partitions. Partition 0 has had no
    CONSUMING segment for longer than PinotMissingConsumingSegment's `for:`, and the stall's
    condition without its paused-partition exception has held on it for longer than the stall's:
    neither alert fires for it. Released and resumed, both alerts resolve."""
    stack.hold_consumers()
    started = time.time()
    pauses = PauseManager(context.current())
    try:
        pauses.pause(TABLE, comment="alerting e2e", partitions="0")
        wait_until(lambda: alerting.value(PAUSED) == 1, 60, 1, "the paused gauge of partition 0")
        wait_until(lambda: alerting.active(PAUSED_ALERT), 120, 1, f"{PAUSED_ALERT} firing")
        figures.record("partition 0 paused", PAUSED_ALERT, started, alerting)
        others = PARTITIONS - {"0"}
        firing = wait_until(
            lambda: _firing_on(alerting, STALLED, others), 120, 1, f"{STALLED} on 1-3 only"
        )
        figures.record("ingestion stalled (consumers held)", STALLED, started, alerting)
        assert {a["labels"]["severity"] for a in firing} == {"critical"}
        assert {a["labels"]["table"] for a in firing} == {RAW}
        wait_until(lambda: alerting.value(MISSING_FOR_20S) >= 1, 400, 1, "no CONSUMING for 20 s")
        wait_until(lambda: _stall_held_without_its_exception(alerting, "0"), 120, 1, "rows wait")
        assert alerting.query(f'ALERTS{{alertname="{MISSING_ALERT}"}}') == []
        assert alerting.active(MISSING_ALERT) == []
        assert _stalled_partitions(alerting) == others
        assert {a["labels"]["partition"] for a in alerting.active(STALLED)} == others
    finally:
        stack.release_consumers()
    pauses.resume(TABLE, partitions="0")
    wait_until(lambda: alerting.value(PAUSED) == 0, 60, 1, "the paused gauge back to 0")
    wait_until(lambda: not alerting.active(PAUSED_ALERT), 120, 1, f"{PAUSED_ALERT} resolved")
    wait_until(lambda: not alerting.active(STALLED), 120, 1, f"{STALLED} resolved")


def _panel_expr(title: str, index: int, **values: str) -> str:
    targets = [expr for name, expr in dashboard_targets(DASHBOARD, values) if name == title]
    return targets[index]


def _rate_panel_reads_the_producer(
    alerting: Alerting, figures: FiringFigures, produced_from: float
) -> None:
    """Once the panel's whole window lies a few seconds after the producer started (the table's
    consumed offsets, summed, were `produced_from`), the panel reads the producer's rate."""
    window_after_start = f"{CONSUMED} offset {RATE_WINDOW}s))"
    wait_until(
        lambda: (alerting.value(window_after_start) or 0) > produced_from + 4 * RATE,
        120,
        1,
        "a rate window full of production",
    )
    expr = _panel_expr("Ingestion rate per table", 0, table=RAW, __rate_interval=f"{RATE_WINDOW}s")
    panel = alerting.value(expr)
    figures.note(
        f"ingestion-rate panel ({RATE_WINDOW} s window, one server of three frozen):"
        f" {panel:.1f} rows/s; the producer writes {RATE}"
    )
    assert abs(panel - RATE) <= RATE * 0.10, (panel, expr)


def _fill_consuming_segments(topic: str) -> None:
    """SEGMENT_ROWS rows more in every partition: each CONSUMING segment reaches its row limit."""
    schema = load("githubEvents_schema.json")
    rows = synthetic_rows(schema, lambda: int(time.time() * 1000))
    batch = [json.dumps(next(rows).fields).encode() for _ in range(SEGMENT_ROWS)]
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    admin.produce_many(topic, {p: batch for p in range(4)}, now_ms=int(time.time() * 1000))


def _controller_frozen(stack: AlertingStack, alerting, figures, topic: str) -> None:
    """Its leadControllerResource partitions have no MASTER (read from ZooKeeper by the web's
    /metrics); the segments at their row limit cannot commit, so ingestion stalls."""
    controller = stack.procs["controller"]
    controller.send_signal(signal.SIGSTOP)
    started = time.time()
    try:
        _fill_consuming_segments(topic)
        wait_until(lambda: alerting.active(LEADERLESS), 180, 1, f"{LEADERLESS} in Alertmanager")
        figures.record("the only controller frozen", LEADERLESS, started, alerting)
        wait_until(lambda: _in_console("firing", LEADERLESS, ""), 60, 0.5, f"{LEADERLESS} shown")
        wait_until(lambda: _firing_on(alerting, STALLED, PARTITIONS), 120, 1, f"{STALLED} (frozen)")
        figures.record("the only controller frozen", STALLED, started, alerting)
    finally:
        controller.send_signal(signal.SIGCONT)
    wait_until(lambda: not alerting.active(LEADERLESS), 180, 1, f"{LEADERLESS} resolved")
    wait_until(lambda: _in_console("resolved", LEADERLESS, ""), 60, 0.5, f"{LEADERLESS} resolved")
    wait_until(lambda: not alerting.active(STALLED), 180, 1, f"{STALLED} resolved (thawed)")


def _control_plane_absent(stack: AlertingStack, alerting, figures) -> None:
    started = time.time()
    stack.kill("controller", signal.SIGTERM)
    stack.kill("web", signal.SIGTERM)
    absent = wait_until(lambda: alerting.active(ABSENT), 120, 1, f"{ABSENT} in Alertmanager")
    figures.record("every controller and web process stopped", ABSENT, started, alerting)
    assert [a["labels"]["severity"] for a in absent] == ["critical"]
    stack.start_controller()
    stack.start_web()
    wait_until(lambda: not alerting.active(ABSENT), 120, 1, f"{ABSENT} resolved in Alertmanager")


def _every_panel_has_data(alerting: Alerting, since: float) -> None:
    """Each panel target, `$table` from the dashboard's variable query, over the whole run."""
    dashboard = json.loads(DASHBOARD.read_text())
    variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "table")
    match, label = re.fullmatch(
        r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"]
    ).groups()
    assert RAW in alerting.label_values(label, match)
    values = {"table": RAW, "__rate_interval": "8s", "__interval": "2s"}
    empty = dashboard_targets(DASHBOARD, values)

    def all_answered() -> bool:  # a sample just scraped may fall after the last step's time
        empty[:] = [(t, e) for t, e in empty if not alerting.query_range(e, since, time.time())]
        return not empty

    try:
        wait_until(all_answered, 30, 1, "every panel's data")
    except TimeoutError:
        raise AssertionError(f"panels without data: {empty}") from None


def test_faults_fire_alerts_in_alertmanager_and_the_console_then_resolve(
    alerting_stack, client, django_user_model
):
    stack, alerting, topic = alerting_stack
    began = time.time()
    figures = FiringFigures()
    for name in (ALERT, PAUSED_ALERT, MISSING_ALERT, LEADERLESS, ABSENT):  # only `for:` shortened
        assert alerting.rules[name]["expr"] == figures.rules[name]["expr"], name
    produced_from = alerting.value(f"{CONSUMED}))") or 0
    producer = produce(topic, RATE * 900, rate=RATE)
    try:
        wait_until(lambda: _fully_replicated(alerting), 180, 1, "every partition fully replicated")
        assert alerting.active(ALERT) == [] and not _in_console("firing")
        _server_frozen(stack, alerting, figures, client, django_user_model, produced_from)
        _paused_while_consumers_held(stack, alerting, figures)
        _controller_frozen(stack, alerting, figures, topic)
    finally:
        producer.terminate()
        producer.wait(timeout=30)
    # The table paused (for the dashboard's paused-table query), then the control plane stopped.
    PauseManager(context.current()).pause(TABLE, comment="alerting e2e: the paused panel")
    _control_plane_absent(stack, alerting, figures)
    table_paused = f'max(pinot_controller_tableConsumptionPaused_Value{{table="{RAW}"}})'
    wait_until(lambda: alerting.value(table_paused) == 1, 60, 1, "the table's paused gauge")
    _every_panel_has_data(alerting, began)
    print(figures.write(FIGURES))  # noqa: T201 (the figures, for the run's output)
