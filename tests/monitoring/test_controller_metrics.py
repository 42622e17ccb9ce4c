"""Controller-side /metrics: cluster state from the mirror under Pinot's names and labels (§9.3),
and the Prometheus / Grafana files of deploy/ that use them.

Mirror rows are written straight into the database (the fixture code below), the scrape goes
through the Django test client like Prometheus's would: anonymous, with the leadership read from
ZooKeeper off (`mirror_leadership`).
"""

from __future__ import annotations

import gzip
import math
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from monitoring import leadership_live
from monitoring.controller_metrics import DEFINITIONS
from tables.cluster.errors import Unavailable
from tables.models import (
    DurableCounter,
    LeadControllerPartition,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    MirrorState,
    PartitionStatus,
)

pytestmark = pytest.mark.django_db

READ_LIVE_LEADERSHIP = leadership_live.read_live_leadership
ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Six, one more for the pauseless tables' ERROR segments, two more for the partitions no replica
# reports on (paused ones here: monitoring.stream_offsets).
MAX_QUERIES = 9
# Pinot's names and its `tableType` label are camelCase; the console's own names are not.
CAMEL_CASE_LINT = re.compile(
    r"^(pinot_(controller|server)_\w+ (metric|label)|pinot_console_\w+ label) names should be "
    r"written in 'snake_case' not 'camelCase'$"
)


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not installed: scripts/bootstrap.sh installs it (Debian package "
            "`prometheus`); the metrics and deploy/prometheus files are checked with it"
        )
    return path


# --- mirror fixture code --------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def mirror_leadership(monkeypatch) -> None:
    """These tests check the figures computed from the mirror: the leadership read from
    ZooKeeper at scrape time is off (tests/monitoring/test_leadership_metrics.py covers it)."""
    monkeypatch.setattr(leadership_live, "read_live_leadership", lambda: None)


def make_table(raw: str, table_type: str = "REALTIME", **fields: Any) -> MirroredTable:
    return MirroredTable.objects.create(
        name=f"{raw}_{table_type}",
        raw_name=raw,
        table_type=table_type,
        last_synced=timezone.now(),
        **fields,
    )


def make_partitions(table: MirroredTable, lags: list[tuple[int, int] | None]) -> None:
    """One partition per entry: its (records lag, time lag), or None when its lag is unknown (no
    reporting replica knows its upstream offset: the mirror's upstream_offset is null)."""
    PartitionStatus.objects.bulk_create(
        PartitionStatus(
            table=table,
            partition=partition,
            records_lag=lag[0] if lag else 0,
            time_lag_ms=lag[1] if lag else 0,
            current_offset=1000 if lag else None,
            upstream_offset=1000 + lag[0] if lag else None,
            verdict="OK" if lag else "NOT_REPORTING",
            last_synced=timezone.now(),
        )
        for partition, lag in enumerate(lags)
    )


def make_instance(name: str, kind: str, live: bool) -> None:
    MirroredInstance.objects.create(name=name, kind=kind, live=live, last_synced=timezone.now())


def make_segment(
    table: MirroredTable,
    status: str,
    external: dict[str, str],
    ideal: dict[str, str] | None = None,
    name: str = "",
) -> MirroredSegment:
    """A segment of `table` as the mirror keeps it: an LLC name (unless `name`), its IdealState
    replicas ONLINE (unless `ideal`) and `external` as its ExternalView."""
    count = MirroredSegment.objects.filter(table=table).count()
    llc = f"{table.raw_name}__0__{count}__20240101T0000Z"
    ideal = {server: "ONLINE" for server in external} if ideal is None else ideal
    return MirroredSegment.objects.create(
        table=table,
        name=name or llc,
        partition=0,
        sequence=None if name else count,
        ideal_states=ideal,
        external_states=external,
        display_state="ERROR" if "ERROR" in external.values() else "ONLINE",
        has_error="ERROR" in external.values(),
        status=status,
        last_synced=timezone.now(),
    )


def make_lead_partitions(masters: list[str], leaderless_s: float | None = None) -> None:
    """One partition per entry with that live MASTER; a blank one without a MASTER since
    `leaderless_s` seconds (None: not known)."""
    since = None if leaderless_s is None else timezone.now() - timedelta(seconds=leaderless_s)
    LeadControllerPartition.objects.bulk_create(
        LeadControllerPartition(
            partition_id=i,
            name=f"leadControllerResource_{i}",
            controller=master,
            leaderless_since=None if master else since,
            last_synced=timezone.now(),
        )
        for i, master in enumerate(masters)
    )


def make_many_tables(count: int, partitions: int = 16) -> None:
    for i in range(count):
        table = make_table(
            f"t{i:04d}", error_replicas=i % 3, paused=i % 2 == 0, pauseless=i % 2 == 1, topic="e"
        )
        make_partitions(table, [(p * 10, p * 100) for p in range(partitions)])
        DurableCounter.increment("segmentBuildFailure", f"{table.name}-e-0")
        make_segment(table, "COMMITTING", {"s1": "ERROR", "s2": "ERROR"})


@pytest.fixture
def cluster_mirror() -> None:
    """Two realtime tables and an offline one, partitions, counters, instances, leadership."""
    events = make_table(
        "githubEvents",
        error_replicas=2,
        error_segments=1,
        percent_available=75,
        paused=True,
        missing_consuming=1,
        pauseless=True,
        missing_download_url=3,
        topic="events",
    )
    make_partitions(events, [(0, 0), (1500, 42000)])
    make_table("airlineStats", percent_available=100)
    make_table("airlineStats", table_type="OFFLINE", error_replicas=1, percent_available=50)
    # Pinot's keys: the consumer client id for build failures, the table for re-ingestions; and
    # counts kept under the counters' old names, per raw table (added in).
    DurableCounter.increment("segmentBuildFailure", "githubEvents_REALTIME-events-1", by=2)
    DurableCounter.increment("segmentBuildFailures", "githubEvents")
    DurableCounter.increment("segmentReingestionFailure", "githubEvents", by=3)
    DurableCounter.increment("reingestionFailures", "githubEvents")
    DurableCounter.increment("llcStreamDataLoss", "githubEvents_REALTIME", by=5)
    DurableCounter.increment("llcStateMachineAborts", "airlineStats")
    DurableCounter.increment("notExposedYet", "githubEvents")
    make_instance("Server_127.0.0.1_8098", "SERVER", live=True)
    make_instance("Server_127.0.0.1_8099", "SERVER", live=False)
    make_instance("Controller_127.0.0.1_9000", "CONTROLLER", live=True)
    make_instance("Controller_127.0.0.1_9001", "CONTROLLER", live=True)
    make_instance("Controller_127.0.0.1_9002", "CONTROLLER", live=False)
    make_lead_partitions(
        ["Controller_127.0.0.1_9000"] * 3 + ["Controller_127.0.0.1_9001", ""], leaderless_s=600
    )
    MirrorState.objects.create(
        name="zk",
        last_synced=timezone.now() - timedelta(seconds=30),
        last_attempt=timezone.now(),
        duration_ms=250,
        error="",
        cluster_leader="Controller_127.0.0.1_9001",
        lead_resource_enabled=True,
    )


def scrape(client) -> str:
    resp = client.get("/metrics")
    assert resp.status_code == 200, resp.content[:500]
    assert resp["Content-Type"].startswith("text/plain; version=")
    return resp.content.decode()


def samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """family name -> {sorted label pairs: value}."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        series = found.setdefault(family.name, {})
        for sample in family.samples:
            series[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def labels(**pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs.items()))


def types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))


# --- the scrape -----------------------------------------------------------------------------------


def test_the_families_labels_and_values_are_pinots(client, cluster_mirror) -> None:
    text = scrape(client)
    got = samples(text)
    ev = labels(table="githubEvents", tableType="REALTIME")
    air = labels(table="airlineStats", tableType="REALTIME")
    air_off = labels(table="airlineStats", tableType="OFFLINE")

    assert got["pinot_controller_segmentsInErrorState_Value"] == {ev: 2, air: 0, air_off: 1}
    assert got["pinot_controller_percentSegmentsAvailable_Value"] == {
        ev: 75,
        air: 100,
        air_off: 50,
    }
    assert got["pinot_controller_segmentsMissingDownloadUrl_Value"] == {ev: 3, air: 0, air_off: 0}
    # Realtime-only gauges: no OFFLINE series.
    assert got["pinot_controller_tableConsumptionPaused_Value"] == {ev: 1, air: 0}
    # The mirror's count leaves paused partitions out; Pinot's (the IdealState's) counts them:
    # githubEvents is paused and its two partitions have no CONSUMING segment (1 + 2).
    assert got["pinot_controller_missingConsumingSegmentTotalCount_Value"] == {ev: 3, air: 0}
    assert got["pinot_controller_pauselessConsumptionEnabled_Value"] == {ev: 1, air: 0}
    assert got["pinot_console_paused_partitions"] == {ev: 2, air: 0}

    p0 = labels(table="githubEvents", tableType="REALTIME", partition="0")
    p1 = labels(table="githubEvents", tableType="REALTIME", partition="1")
    # A paused table's lag is reported (the rows waiting), labelled paused="true".
    q0, q1 = (labels(**dict(p), paused="true") for p in (p0, p1))
    assert got["pinot_controller_maxRecordsLag_Value"] == {q0: 0, q1: 1500}
    assert got["pinot_controller_maxRecordAvailabilityLagMs_Value"] == {q0: 0, q1: 42000}
    assert got["pinot_console_partition_paused"] == {p0: 1, p1: 1}
    assert got["pinot_console_partition_consumed_offset"] == {p0: 1000, p1: 1000}
    assert got["pinot_console_partition_upstream_offset"] == {p0: 1000, p1: 2500}
    assert got["pinot_console_partition_replicas_up"] == {p0: 0, p1: 0}
    assert got["pinot_console_partition_replicas_expected"] == {p0: 1, p1: 1}

    # Pauseless tables only; no ERROR segment mirrored here.
    assert got["pinot_controller_pauselessSegmentsInErrorCount_Value"] == {ev: 0}
    assert got["pinot_controller_pauselessSegmentsInUnrecoverableErrorCount_Value"] == {ev: 0}

    # Durable counters: a 0 for every realtime table; the stored `_REALTIME` name is the raw one.
    # Pinot's server meters: build failures by client id (a 0 for every mirrored partition; the
    # old per-table count has no topic or partition), re-ingestion failures per table.
    client = {"table": "githubEvents", "tableType": "REALTIME", "topic": "events"}
    assert got["pinot_server_segmentBuildFailure_Count"] == {
        labels(**client, partition="0"): 0,
        labels(**client, partition="1"): 2,
        labels(table="githubEvents", tableType="REALTIME", topic="", partition=""): 1,
    }
    assert got["pinot_server_segmentReingestionFailure_Count"] == {ev: 4, air: 0}
    assert not any("Failures" in name for name in got)
    assert got["pinot_controller_llcStreamDataLoss_Count"] == {ev: 5, air: 0}
    assert got["pinot_controller_llcStateMachineAborts_Count"] == {ev: 0, air: 1}
    assert not any("notExposedYet" in name for name in got)

    assert got["pinot_controller_LeaderPartitionCount_Value"] == {
        labels(controller="Controller_127.0.0.1_9000"): 3,
        labels(controller="Controller_127.0.0.1_9001"): 1,
    }
    # The cluster leader and RESOURCE_ENABLED per live controller (9002 is not live).
    assert got["pinot_controller_pinotControllerLeader_Value"] == {
        labels(controller="Controller_127.0.0.1_9000"): 0,
        labels(controller="Controller_127.0.0.1_9001"): 1,
    }
    assert got["pinot_controller_pinotLeadControllerResourceEnabled_Value"] == {
        labels(controller="Controller_127.0.0.1_9000"): 1,
        labels(controller="Controller_127.0.0.1_9001"): 1,
    }
    assert got["pinot_console_lead_controller_partitions_without_master"] == {(): 1}
    leaderless = got["pinot_console_lead_controller_leaderless_seconds"]
    assert list(leaderless) == [labels(partition="4")]
    assert 600 <= leaderless[labels(partition="4")] < 660
    assert got["pinot_console_live_instances"] == {
        labels(kind="SERVER"): 1,
        labels(kind="CONTROLLER"): 2,
    }
    assert got["pinot_console_instances"] == {
        labels(kind="SERVER"): 2,
        labels(kind="CONTROLLER"): 3,
    }
    assert got["pinot_console_tables"] == {
        labels(tableType="REALTIME"): 2,
        labels(tableType="OFFLINE"): 1,
    }
    assert 30 <= got["pinot_console_mirror_age_seconds"][()] < 90
    assert got["pinot_console_mirror_sync_duration_seconds"] == {(): 0.25}
    assert got["pinot_console_mirror_sync_error"] == {(): 0}
    synced_at = got["pinot_console_mirror_last_sync_timestamp_seconds"][()]
    assert abs(synced_at - timezone.now().timestamp()) < 90

    # Exactly the defined families, each once, with the defined type; `_Count` stays untyped
    # (Pinot's JMX exporter names) instead of becoming a `_total` counter.
    assert types(text) == {d.name: d.kind for d in DEFINITIONS.values()}
    assert text.count("# HELP ") == len(DEFINITIONS)
    for definition in DEFINITIONS.values():
        assert len(definition.help) > 30, definition.name
        for series in got.get(definition.name, {}):
            assert {k for k, _ in series} <= set(definition.labels), (definition.name, series)


def test_an_empty_mirror_still_scrapes_and_says_it_never_synced(client) -> None:
    got = samples(scrape(client))
    assert got["pinot_console_mirror_age_seconds"] == {(): math.inf}
    assert got["pinot_console_mirror_last_sync_timestamp_seconds"] == {}
    assert got["pinot_controller_segmentsInErrorState_Value"] == {}
    assert got["pinot_console_live_instances"] == {
        labels(kind="SERVER"): 0,
        labels(kind="CONTROLLER"): 0,
    }
    assert got["pinot_console_lead_controller_partitions_without_master"] == {(): 0}
    assert got["pinot_controller_LeaderPartitionCount_Value"] == {}
    assert got["pinot_controller_pinotControllerLeader_Value"] == {}
    assert got["pinot_controller_pinotLeadControllerResourceEnabled_Value"] == {}
    assert got["pinot_console_lead_controller_leaderless_seconds"] == {}


def test_a_failing_sync_and_a_cluster_wide_counter_are_reported(client) -> None:
    MirrorState.objects.create(name="zk", last_synced=None, duration_ms=1200, error="ZK down")
    DurableCounter.increment("llcStreamDataLoss", "", by=4)
    got = samples(scrape(client))
    assert got["pinot_console_mirror_sync_error"] == {(): 1}
    assert got["pinot_console_mirror_sync_duration_seconds"] == {(): 1.2}
    assert got["pinot_controller_llcStreamDataLoss_Count"] == {(): 4}


ALL_ERROR = {"Server_1": "ERROR", "Server_2": "ERROR"}
PARTIAL_UPSERT = {"upsertConfig": {"mode": "PARTIAL"}}
ALWAYS = {"ingestionConfig": {"streamIngestionConfig": {"disasterRecoveryMode": "ALWAYS"}}}


def test_pauseless_error_gauges_count_as_pinots_validation_manager(client) -> None:
    """Per pauseless table: LLC segments of the IdealState with every ExternalView replica in
    ERROR, whatever their status (RSVM's errorInAll); unrecoverable when partial upsert or dedup
    forbid the repair in DEFAULT mode. No series for a table without pauseless consumption."""
    plain = make_table("plain", pauseless=True, config={"tableName": "plain_REALTIME"})
    make_segment(plain, "COMMITTING", ALL_ERROR)  # counts: needs re-ingestion
    make_segment(plain, "DONE", ALL_ERROR)  # counts too (the healer resets it)
    make_segment(plain, "COMMITTING", {"Server_1": "ERROR", "Server_2": "ONLINE"})
    make_segment(plain, "COMMITTING", ALL_ERROR, ideal={})  # not in the IdealState
    make_segment(plain, "DONE", ALL_ERROR, name="plain__0__upload__20240101T0000Z")  # not LLC
    partial = make_table("partial", pauseless=True, config=PARTIAL_UPSERT)
    make_segment(partial, "COMMITTING", ALL_ERROR)
    make_segment(partial, "DONE", ALL_ERROR)
    make_table("partialOk", pauseless=True, config={**PARTIAL_UPSERT, **ALWAYS})
    make_segment(MirroredTable.objects.get(raw_name="partialOk"), "COMMITTING", ALL_ERROR)
    dedup = make_table("dedup", pauseless=True, config={"dedupConfig": {"dedupEnabled": True}})
    make_segment(dedup, "COMMITTING", ALL_ERROR)
    make_table("quiet", pauseless=True)
    make_segment(make_table("classic"), "DONE", ALL_ERROR)  # not pauseless: no series

    got = samples(scrape(client))

    def table(raw: str) -> tuple[tuple[str, str], ...]:
        return labels(table=raw, tableType="REALTIME")

    assert got["pinot_controller_pauselessSegmentsInErrorCount_Value"] == {
        table("plain"): 2,
        table("partial"): 2,
        table("partialOk"): 1,
        table("dedup"): 1,
        table("quiet"): 0,
    }
    assert got["pinot_controller_pauselessSegmentsInUnrecoverableErrorCount_Value"] == {
        table("plain"): 0,
        table("partial"): 2,
        table("partialOk"): 0,
        table("dedup"): 1,
        table("quiet"): 0,
    }


def test_an_unknown_lag_is_absent_not_zero(client) -> None:
    """A partition no replica reports on (or whose upstream offset nobody knows) has no lag
    sample: a 0 would read as caught up."""
    events = make_table("githubEvents")
    make_partitions(events, [(7, 700), None])
    got = samples(scrape(client))
    p0 = labels(table="githubEvents", tableType="REALTIME", partition="0", paused="false")
    assert got["pinot_controller_maxRecordsLag_Value"] == {p0: 7}
    assert got["pinot_controller_maxRecordAvailabilityLagMs_Value"] == {p0: 700}


def test_a_deleted_table_leaves_no_series(client, cluster_mirror) -> None:
    """Once the sync deletes a table's mirror rows, no family keeps its label set, not even the
    durable counters (which outlive the table in the database)."""
    before = scrape(client)
    assert 'table="githubEvents"' in before
    MirroredTable.objects.filter(raw_name="githubEvents").delete()  # as tables.mirror.sync does
    after = scrape(client)
    assert 'table="githubEvents"' not in after
    got = samples(after)
    air = labels(table="airlineStats", tableType="REALTIME")
    assert got["pinot_server_segmentBuildFailure_Count"] == {}  # airlineStats has no partition
    assert got["pinot_server_segmentReingestionFailure_Count"] == {air: 0}
    assert got["pinot_controller_llcStateMachineAborts_Count"] == {air: 1}


def test_prometheus_scrapes_without_a_session(client, cluster_mirror) -> None:
    resp = client.get("/metrics")  # no login: the LoginRequiredMiddleware lets it through
    assert resp.status_code == 200
    assert b"pinot_controller_segmentsInErrorState_Value" in resp.content
    assert "no-cache" in resp["Cache-Control"]
    assert client.head("/metrics").status_code == 200
    assert client.post("/metrics").status_code == 405


def test_a_scrape_answers_while_zookeeper_is_unreachable(client, cluster_mirror, monkeypatch):
    """Only the leadership is read from ZooKeeper (`monitoring.leadership_live`); while it cannot
    be, the mirror's leadership stands and ZooKeeper is not asked again for a while."""
    calls = []

    def unreachable() -> None:
        calls.append(1)
        raise Unavailable("ZooKeeper at 127.0.0.1:1 is unreachable")

    monkeypatch.setattr(leadership_live, "read_live_leadership", READ_LIVE_LEADERSHIP)
    monkeypatch.setattr(leadership_live, "current", unreachable)
    leadership_live.forget()
    try:
        for _ in range(2):
            got = samples(scrape(client))
            assert got["pinot_controller_segmentsInErrorState_Value"]
            assert got["pinot_console_lead_controller_partitions_without_master"] == {(): 1}
            assert got["pinot_controller_LeaderPartitionCount_Value"] == {
                labels(controller="Controller_127.0.0.1_9000"): 3,
                labels(controller="Controller_127.0.0.1_9001"): 1,
            }
    finally:
        leadership_live.forget()
    assert calls == [1]  # the second scrape did not wait for ZooKeeper again


@pytest.mark.parametrize("tables", [5, 50])
def test_the_query_count_does_not_grow_with_the_tables(
    client, django_assert_max_num_queries, tables: int
) -> None:
    make_many_tables(tables)
    with django_assert_max_num_queries(MAX_QUERIES):
        got = samples(scrape(client))
    assert len(got["pinot_controller_segmentsInErrorState_Value"]) == tables
    assert len(got["pinot_controller_maxRecordsLag_Value"]) == tables * 16
    assert len(got["pinot_server_segmentBuildFailure_Count"]) == tables * 16
    assert sum(got["pinot_controller_pauselessSegmentsInErrorCount_Value"].values()) == tables // 2


def test_the_query_count_is_the_same_for_5_and_50_tables(client) -> None:
    make_many_tables(5)
    with CaptureQueriesContext(connection) as few:
        scrape(client)
    for i in range(45):
        make_partitions(make_table(f"more{i:04d}"), [(1, 1)] * 16)
    with CaptureQueriesContext(connection) as many:
        got = samples(scrape(client))
    assert len(got["pinot_controller_percentSegmentsAvailable_Value"]) == 50
    assert len(few) == len(many) <= MAX_QUERIES


def test_a_scrape_that_accepts_gzip_gets_it(client, cluster_mirror) -> None:
    plain = scrape(client)
    resp = client.get("/metrics", HTTP_ACCEPT_ENCODING="gzip")
    assert resp.status_code == 200
    assert resp["Content-Encoding"] == "gzip"
    unzipped = gzip.decompress(resp.content).decode()
    assert len(resp.content) < len(plain)

    def steady(text: str) -> dict:  # the mirror's age and the leaderless time move
        moving = ("Age", "age", "leaderless_seconds")
        return {k: v for k, v in samples(text).items() if not any(m in k for m in moving)}

    assert steady(unzipped) == steady(plain)
    assert steady(plain)


def test_promtool_accepts_the_exposition(client, cluster_mirror) -> None:
    """No parse error, no lint problem but the camelCase names and labels that Pinot's JMX
    exporter rules produce (§9.3), and none at all in this console's own families."""
    DurableCounter.increment("llcStreamDataLoss", "", by=1)  # a mixed-label family too
    text = scrape(client)
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    output = (result.stdout + result.stderr).strip()
    assert result.returncode in (0, 3), output  # 3: lint problems only, listed below
    problems = [line for line in output.splitlines() if line.strip()]
    unexpected = [line for line in problems if not CAMEL_CASE_LINT.match(line)]
    assert unexpected == [], output
    assert not any(
        line.startswith("pinot_console_") and " metric names " in line for line in problems
    )
