"""A build that fails for a reason waiting cannot cure backs off (issue 23), end to end: a real
controller, three servers and the session's Spark worker.

The table's ingestion transform parses `created_at` with the pattern `uuuu-MM-dd'T'HH:mm:ssZ`: the
table config passes create-time validation, but Spark 3+ refuses the pattern when the build
plans it (`tables.segments.builder._plan`: "unsupported date-time pattern"), so every build of
every segment fails the same way. (Should create-time validation ever refuse that pattern, the
test falls back to the fault point `spark.<segment>.build_rejects`, a deterministic failure
injected in the Spark worker, and the fix also disarms it.)

Shown: each first segment's failure is listed on the errors page's "Failed builds" with its
reason; over a window in which today's loop (2, 4, 8 s ... between commits) would have built
each segment several times, no build runs again (one FAILED Job row per segment, the durable
`segmentBuildFailure` counter at one per partition) and the consumers hold; a table config
update (the fixture's own pattern) makes every segment build and commit, the errors page no
longer lists them, and `verify_ledger --rows` is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.test import Client

from tables.builds import BUILD_FAILURES
from tables.cluster import context
from tables.cluster.errors import BadRequest
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.models import DurableCounter, FailedBuild, Job
from tests import envdefaults
from tests.accounts import grant
from tests.cluster_fixtures import load
from tests.ingest_cluster import (
    all_committed,
    produce,
    replicas_by_server,
    table_config,
    verify_rows,
)
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"
FAULTS = Path(envdefaults.VAR_DIR) / "faults"  # the Celery workers' FAULT_INJECTION_DIR
BAD_PATTERN = "fromDateTime(created_at, 'uuuu-MM-dd''T''HH:mm:ssZ')"
ROWS = 400
WINDOW_S = 15  # today's loop would have built each failed segment again at least twice by then


def _config(topic: str) -> dict:
    return table_config(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": "100000",
            "realtime.segment.flush.threshold.time": "6s",
        },
    )


def _first_segments(manager: ResourceManager) -> list[str]:
    return sorted(
        s for s in manager.idealstate(TABLE) if LLCSegmentName.parse(s).sequence_number == 0
    )


def _create_failing_table(manager: ResourceManager, topic: str) -> Callable[[], None]:
    """The table, whose builds fail deterministically; returns the fix."""
    bad = _config(topic)
    bad["ingestionConfig"]["transformConfigs"][0]["transformFunction"] = BAD_PATTERN
    try:
        manager.add_table(bad)
        return lambda: manager.update_table(TABLE, _config(topic))
    except BadRequest:  # validation learnt to refuse the pattern: a deterministic fault instead
        manager.add_table(_config(topic))
    points = [FAULTS / f"spark.{s}.build_rejects" for s in _first_segments(manager)]
    for point in points:
        point.touch()

    def fix() -> None:
        fixed = _config(topic)
        fixed["metadata"] = {"customConfigs": {"buildFix": "1"}}
        manager.update_table(TABLE, fixed)
        for point in points:
            point.unlink(missing_ok=True)

    return fix


def _failed_jobs(segments: list[str]):
    return Job.objects.filter(kind=Job.Kind.BUILD, status=Job.Status.FAILED, segment__in=segments)


def test_a_deterministic_build_failure_backs_off_until_the_config_is_fixed(
    ingest, topic, django_user_model
):
    producer = produce(topic, ROWS, rate=2_000)
    output, _ = producer.communicate(timeout=120)
    assert producer.returncode == 0, output.decode(errors="replace")
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    fix = _create_failing_table(manager, topic)
    segments = _first_segments(manager)
    page = Client()
    page.force_login(grant(django_user_model.objects.create_user("otto"), "operator"))

    wait_until(
        lambda: FailedBuild.objects.filter(segment__in=segments).count() == len(segments),
        timeout=180,
        interval=0.5,
        what="every first segment's build failed and recorded",
    )
    html = page.get("/ui/errors/").content.decode()
    for segment in segments:
        assert f'data-failed-segment="{segment}"' in html
    assert "unsupported date-time pattern" in html or "fault injection (deterministic)" in html
    held = wait_until(
        lambda: [
            item
            for items in replicas_by_server(ingest, TABLE).values()
            for item in items
            if (item.get("holdReason") or "").startswith("build failed: ")
        ],
        timeout=30,
        what="a consumer holding with the reason in /debug",
    )
    assert {item["phase"] for item in held} == {"HOLDING"} and "next try at" in held[0][
        "holdReason"
    ]

    with pytest.raises(TimeoutError):  # no second build of any of them: they back off
        wait_until(
            lambda: _failed_jobs(segments).count() > len(segments), timeout=WINDOW_S, interval=0.5
        )
    failed = _failed_jobs(segments)
    assert sorted(failed.values_list("segment", flat=True)) == segments
    assert {job.details.get("failure") for job in failed} == {"deterministic"}
    counted = DurableCounter.objects.filter(name=BUILD_FAILURES, table__contains=topic)
    assert sum(counted.values_list("value", flat=True)) == len(segments)
    assert set(FailedBuild.objects.values_list("failures", flat=True)) == {1}

    fix()
    wait_until(
        lambda: all_committed(topic, TABLE), timeout=180, interval=1, what="all rows committed"
    )
    assert not FailedBuild.objects.exists()
    assert 'data-failed-segment="' not in page.get("/ui/errors/").content.decode()
    assert _failed_jobs(segments).count() == len(segments)
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
