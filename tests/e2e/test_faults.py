"""Crash and lag tests of the completion protocol with real processes; each ends with
`verify_ledger --rows` once every produced row is committed.

- the designated committer is killed (-9) after COMMIT: another replica commits after the deadline;
- a replica paused behind the others gets CATCH_UP, then KEEP or DISCARD (reference §5.4);
- a server killed mid-segment and restarted consumes the segment again from its start offset;
- the controller killed mid-commit (its FSMs lost) and restarted: the cluster still converges.
"""

from __future__ import annotations

import os
import re
import signal

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import (
    IngestCluster,
    admin_get,
    all_committed,
    find_phase,
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
EARLY_ROWS = 500  # the lagging-replica test stops its laggard before this many rows


def _create_table(topic: str, **stream: str) -> ResourceManager:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic, **stream))
    return manager


def _finish(producer, topic: str) -> None:
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")
    wait_until(
        lambda: all_committed(topic, TABLE), timeout=600, interval=1, what="all rows committed"
    )
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report


def _response_count(cluster: IngestCluster, index: int, status: str) -> int:
    metrics = admin_get(cluster.server_ports[f"server{index}"], "/metrics")
    match = re.search(rf"^pinot_server_llcControllerResponse{status}_Count (\S+)$", metrics, re.M)
    return int(float(match.group(1))) if match else 0


def _phase_of(cluster: IngestCluster, index: int, segment: str) -> str | None:
    """The consumer phase of `segment` on server `index` (None when it has no consumer)."""
    items = admin_get(cluster.server_ports[f"server{index}"], f"/debug/tables/{TABLE}")
    return next((i.get("phase") for i in items if i["segmentName"] == segment), None)


def _index_of(cluster: IngestCluster, instance: str) -> int:
    return next(i for i in range(3) if cluster.server_id(i) == instance)


def test_killed_committer_another_replica_commits_after_the_deadline(ingest, topic, worker_zk):
    _create_table(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": "4000",
            "realtime.segment.flush.threshold.time": "10s",
            "realtime.segment.commit.timeoutSeconds": "5",
        },
    )
    producer = produce(topic, 24_000, rate=2_000)
    index, item = wait_until(
        lambda: find_phase(ingest, TABLE, "COMMITTING"), timeout=120, what="a committer"
    )
    segment = item["segmentName"]
    ingest.kill(f"server{index}")  # SIGKILL: its rows, staging file and build are abandoned
    _finish(producer, topic)

    manager = ResourceManager(context.current())
    assert manager.segment_metadata(TABLE, segment).status == "DONE"
    survivors = [i for i in range(3) if i != index]
    assert any(f"{segment}: committed" in ingest.log(f"server{i}") for i in survivors)
    assert worker_zk.exists(PATHS.liveinstance(ingest.server_id(index))) is None


def test_a_lagging_replica_gets_catch_up_then_keep_or_discard(ingest, topic, celery_workers):
    """The segment ends on time. The laggard is stopped early in it (a few hundred rows in, many
    seconds of production before the time limit), so when it wakes after the limit it asks at
    once with fewer rows than the committer has; and the Spark worker is held while the committer
    builds, so that question lands while the committer is still uploading: CATCH_UP, never a race
    with commit end (which would make it DISCARD straight away)."""
    manager = _create_table(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": "100000",
            "realtime.segment.flush.threshold.time": "15s",
        },
    )
    first = sorted(
        s for s in manager.idealstate(TABLE) if LLCSegmentName.parse(s).sequence_number == 0
    )
    segment = first[0]
    instances = sorted(manager.idealstate(TABLE)[segment])
    leader, laggard = _index_of(ingest, instances[0]), _index_of(ingest, instances[1])
    producer = produce(topic, 16_000, rate=1_000)

    def laggard_early() -> bool:
        items = replicas_by_server(ingest, TABLE).get(laggard, [])
        return any(i["segmentName"] == segment and 0 < i.get("rows", 0) < EARLY_ROWS for i in items)

    wait_until(laggard_early, timeout=60, interval=0.05, what="the laggard consuming")
    pid = ingest.procs[f"server{laggard}"].pid
    spark = sorted(celery_workers.child_pids("spark"))
    os.kill(pid, signal.SIGSTOP)  # a long pause: the other replica goes ahead and commits
    try:
        for child in spark:
            os.kill(child, signal.SIGSTOP)  # the committer's build waits (its lease is extended)
        wait_until(
            lambda: _phase_of(ingest, leader, segment) == "COMMITTING",
            timeout=60,
            what=f"the other replica committing {segment}",
        )
        os.kill(pid, signal.SIGCONT)
        wait_until(
            lambda: _response_count(ingest, laggard, "CatchUp") >= 1,
            timeout=60,
            what="the laggard told to catch up",
        )
    finally:
        for child in spark:
            os.kill(child, signal.SIGCONT)
        os.kill(pid, signal.SIGCONT)
    log_line = re.compile(rf"{re.escape(segment)}: (KEEP|DISCARD) at offset")
    wait_until(
        lambda: log_line.search(ingest.log(f"server{laggard}")),
        timeout=120,
        what="the laggard's KEEP or DISCARD",
    )
    assert _response_count(ingest, laggard, "CatchUp") >= 1
    _finish(producer, topic)


def test_a_server_killed_mid_segment_resumes_from_the_start_offset(ingest, topic, worker_zk):
    manager = _create_table(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": "100000",
            "realtime.segment.flush.threshold.time": "25s",
        },
    )
    producer = produce(topic, 30_000, rate=1_000)
    found = wait_until(
        lambda: (hit := find_phase(ingest, TABLE, "CONSUMING")) and hit[1]["rows"] > 500 and hit,
        timeout=60,
        what="a consumer with rows in memory",
    )
    index, item = found
    segment = item["segmentName"]
    start = manager.segment_metadata(TABLE, segment).start_offset
    ingest.kill(f"server{index}")
    ingest.start_server(index)  # same instance id: it waits for the old session to expire

    def resumed() -> dict | None:
        items = replicas_by_server(ingest, TABLE).get(index, [])
        hit = next((i for i in items if i["segmentName"] == segment and "phase" in i), None)
        return hit if hit and int(hit["nextOffset"]) > int(start) else None

    again = wait_until(resumed, timeout=60, what=f"{segment} consumed again after the restart")
    assert again["startOffset"] == start
    assert again["rows"] == int(again["nextOffset"]) - int(start) or again["rows"] == 0
    _finish(producer, topic)
    assert manager.segment_metadata(TABLE, segment).status == "DONE"


def test_the_controller_killed_mid_commit_converges_after_restart(ingest, topic):
    _create_table(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": "3000",
            "realtime.segment.flush.threshold.time": "10s",
        },
    )
    producer = produce(topic, 20_000, rate=2_000)
    wait_until(lambda: find_phase(ingest, TABLE, "COMMITTING"), timeout=120, what="a committer")
    ingest.kill("controller")  # SIGKILL: every FSM is lost
    ingest.start_controller()
    _finish(producer, topic)
    # The restarted controller committed segments (its log starts at its last banner).
    restarted = ingest.log("controller").rsplit(" serving http://", 1)[-1]
    assert "tables.controller.llc: committed " in restarted
