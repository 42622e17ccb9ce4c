"""/metrics with the SegmentStatusChecker's results (`TableStatusCheck`) and the periodic-task
meters: a fresh check defines the gauges it computes, a stale one (or none) leaves the mirror's
counts; the checker-only gauges exist only with a fresh check; the scrape's query count stays
fixed; promtool accepts the exposition."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest
from django.utils import timezone

from tables.domain.periods import TASK_ERROR_COUNTER, TASK_RUN_COUNTER
from tables.models import DurableCounter, MirroredTable, TableStatusCheck
from tests.monitoring.test_controller_metrics import (
    CAMEL_CASE_LINT,
    MAX_QUERIES,
    labels,
    promtool,
    samples,
    scrape,
)

pytestmark = pytest.mark.django_db

CHECKER_ONLY = (
    "pinot_controller_segmentsWithLessReplicas_Value",
    "pinot_controller_numberOfReplicas_Value",
    "pinot_controller_percentOfReplicas_Value",
    "pinot_controller_missingConsumingSegmentNewPartitionCount_Value",
    "pinot_controller_missingConsumingSegmentMaxDurationMinutes_Value",
)


def make_table(raw: str, table_type: str = "REALTIME", **fields) -> MirroredTable:
    values = {
        "error_replicas": 5,
        "percent_available": 40,
        "paused": False,
        "missing_consuming": 3,
        **fields,
    }
    return MirroredTable.objects.create(
        name=f"{raw}_{table_type}",
        raw_name=raw,
        table_type=table_type,
        last_synced=timezone.now(),
        **values,
    )


def make_check(table: MirroredTable, age_s: float = 5, **fields) -> TableStatusCheck:
    values = {
        "segments_in_error_state": 1,
        "percent_segments_available": 90,
        "segments_with_less_replicas": 2,
        "number_of_replicas": 1,
        "percent_of_replicas": 50,
        "table_consumption_paused": True,
        "missing_consuming_total": 4,
        "missing_consuming_new_partitions": 1,
        "missing_consuming_max_minutes": 17,
        **fields,
    }
    return TableStatusCheck.objects.create(
        table=table, checked_at=timezone.now() - timedelta(seconds=age_s), **values
    )


@pytest.fixture
def checked(settings) -> None:
    """fresh_REALTIME checked 5 s ago, stale_REALTIME 10 min ago (period 1 min), bare_REALTIME
    never, and an OFFLINE table checked (no realtime-only gauges, no missing figures)."""
    settings.STATUS_CHECKER_FREQUENCY_SECONDS = 60
    make_check(make_table("fresh"))
    make_check(make_table("stale"), age_s=600)
    make_table("bare")
    offline = make_table("fresh", table_type="OFFLINE")
    make_check(
        offline,
        missing_consuming_total=None,
        missing_consuming_new_partitions=None,
        missing_consuming_max_minutes=None,
    )


def test_a_fresh_check_defines_its_gauges_and_the_mirror_stands_in_otherwise(client, checked):
    got = samples(scrape(client))
    fresh = labels(table="fresh", tableType="REALTIME")
    fresh_off = labels(table="fresh", tableType="OFFLINE")
    stale = labels(table="stale", tableType="REALTIME")
    bare = labels(table="bare", tableType="REALTIME")
    assert got["pinot_controller_segmentsInErrorState_Value"] == {
        fresh: 1,
        fresh_off: 1,
        stale: 5,
        bare: 5,
    }
    assert got["pinot_controller_percentSegmentsAvailable_Value"] == {
        fresh: 90,
        fresh_off: 90,
        stale: 40,
        bare: 40,
    }
    assert got["pinot_controller_tableConsumptionPaused_Value"] == {fresh: 1, stale: 0, bare: 0}
    assert got["pinot_controller_missingConsumingSegmentTotalCount_Value"] == {
        fresh: 4,
        stale: 3,
        bare: 3,
    }
    assert got["pinot_controller_segmentsWithLessReplicas_Value"] == {fresh: 2, fresh_off: 2}
    assert got["pinot_controller_numberOfReplicas_Value"] == {fresh: 1, fresh_off: 1}
    assert got["pinot_controller_percentOfReplicas_Value"] == {fresh: 50, fresh_off: 50}
    assert got["pinot_controller_missingConsumingSegmentNewPartitionCount_Value"] == {fresh: 1}
    assert got["pinot_controller_missingConsumingSegmentMaxDurationMinutes_Value"] == {fresh: 17}


def test_a_check_without_missing_figures_leaves_the_mirrors_total(client, settings):
    settings.STATUS_CHECKER_FREQUENCY_SECONDS = 60
    table = make_table("empty")
    make_check(
        table,
        missing_consuming_total=None,
        missing_consuming_new_partitions=None,
        missing_consuming_max_minutes=None,
    )
    got = samples(scrape(client))
    empty = labels(table="empty", tableType="REALTIME")
    assert got["pinot_controller_missingConsumingSegmentTotalCount_Value"] == {empty: 3}
    assert got["pinot_controller_missingConsumingSegmentNewPartitionCount_Value"] == {}


def test_an_unscheduled_checker_still_counts_a_check_of_the_last_minutes(client, settings):
    settings.STATUS_CHECKER_FREQUENCY_SECONDS = 0
    make_check(make_table("ondemand"), age_s=120)  # within 3 x 1 min
    make_check(make_table("old"), age_s=400)
    got = samples(scrape(client))
    assert set(got["pinot_controller_numberOfReplicas_Value"]) == {
        labels(table="ondemand", tableType="REALTIME")
    }


def test_the_periodic_task_meters_by_task_name(client):
    empty = samples(scrape(client))
    zero = {
        labels(taskName="RealtimeSegmentValidationManager"): 0,
        labels(taskName="SegmentStatusChecker"): 0,
    }
    assert empty["pinot_controller_controllerPeriodicTaskRun_Count"] == zero
    assert empty["pinot_controller_controllerPeriodicTaskError_Count"] == zero
    DurableCounter.increment(TASK_RUN_COUNTER, "RealtimeSegmentValidationManager", by=7)
    DurableCounter.increment(TASK_ERROR_COUNTER, "RealtimeSegmentValidationManager", by=2)
    DurableCounter.increment(TASK_RUN_COUNTER, "SegmentStatusChecker", by=3)
    got = samples(scrape(client))
    assert got["pinot_controller_controllerPeriodicTaskRun_Count"] == {
        labels(taskName="RealtimeSegmentValidationManager"): 7,
        labels(taskName="SegmentStatusChecker"): 3,
    }
    assert got["pinot_controller_controllerPeriodicTaskError_Count"] == {
        labels(taskName="RealtimeSegmentValidationManager"): 2,
        labels(taskName="SegmentStatusChecker"): 0,
    }


def test_checks_cost_no_extra_query(client, settings, django_assert_max_num_queries):
    settings.STATUS_CHECKER_FREQUENCY_SECONDS = 60
    for i in range(30):
        table = make_table(f"t{i:03d}")
        if i % 2:
            make_check(table)
    with django_assert_max_num_queries(MAX_QUERIES):
        got = samples(scrape(client))
    assert len(got["pinot_controller_segmentsWithLessReplicas_Value"]) == 15
    assert len(got["pinot_controller_segmentsInErrorState_Value"]) == 30


def test_promtool_accepts_the_new_families(client, checked):
    text = scrape(client)
    for name in CHECKER_ONLY:
        assert f"# TYPE {name} gauge" in text
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    output = (done.stdout + done.stderr).strip()
    assert done.returncode in (0, 3), output  # 3: lint problems only (Pinot's camelCase names)
    unexpected = [
        line for line in output.splitlines() if line.strip() and not CAMEL_CASE_LINT.match(line)
    ]
    assert unexpected == [], output
