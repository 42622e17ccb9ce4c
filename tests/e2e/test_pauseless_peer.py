"""Peer download and the deep-store upload repair end to end (issue 17; round 2 §B.2, §B.4, §B.5):
a controller, two servers, the Celery workers (Spark builds) and a producer as real processes; a
pauseless table (4 partitions x replication 2, peer download scheme http).

The deep-store upload fails on the committer of one segment (the one-shot fault point
`server.any.upload_fails`): it commits with `peer:///<segment>`, the segment is DONE with download
URL "" and no deep-store copy (`segmentMissingDeepStoreLink` not counted), and the other replica
fetches it from the committer's admin port. Once every row is committed (no commit in flight),
the test runs the healer with its clock past `max.segment.completion.time.millis` (5 minutes:
builds on a busy machine take tens of seconds, so a short guard would refuse the commit ends
themselves); it has a server upload its copy, moves it to the segment's final key and fills the
URL (`llcSegmentsDeepStoreUploadRetrySuccess`); every row is then in exactly one committed segment
in the deep store (`verify_ledger --rows`).
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tables.builds import deep_store
from tables.cluster import context
from tables.controller.healing import HealingSettings, RealtimeSegmentValidationManager
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import SegmentStatus
from tables.models import DurableCounter
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import IngestCluster, all_committed, produce, table_config, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"
RAW = "githubEvents"
ROWS = 1_600
SEGMENT_ROWS = 300
GUARD_MS = 300_000  # Pinot's default max.segment.completion.time.millis


class PeerCluster(IngestCluster):
    """The ingestion processes with fault injection on, in `faults`."""

    def __init__(self, zk_hosts: str, data_dir: Path, log_prefix: str, faults: Path) -> None:
        super().__init__(zk_hosts, data_dir, log_prefix)
        self.faults = faults

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "FAULT_INJECTION_DIR": str(self.faults)}


@pytest.fixture
def stack(worker_zk, celery_workers, tmp_path, request, settings) -> Iterator[PeerCluster]:
    """A controller and two servers (logs: var/test/logs/<test name>-<process>.log)."""
    (tmp_path / "faults").mkdir()
    name = request.node.name
    cluster = PeerCluster(celery_workers.zk_hosts, tmp_path / "servers", name, tmp_path / "faults")
    for old in cluster.log_dir.glob(f"{name}-*.log"):
        old.unlink()
    cluster.start_controller()
    for index in range(2):
        cluster.start_server(index)
    settings.CONTROLLER_VIP_URL = f"http://127.0.0.1:{cluster.controller_port}"
    wanted = {cluster.controller_id, cluster.server_id(0), cluster.server_id(1)}

    def live() -> bool:
        path = PATHS.liveinstances
        return worker_zk.exists(path) is not None and wanted <= set(worker_zk.get_children(path))

    try:
        wait_until(live, timeout=90, what="the controller and 2 servers live")
        yield cluster
    finally:
        cluster.stop()


def pauseless_config(topic: str) -> dict:
    rest = table_config(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS),
            "realtime.segment.flush.threshold.time": "10s",
        },
    )
    rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
    rest["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    return rest


def _peers_only(manager: ResourceManager) -> list[str]:
    return [
        s
        for s in manager.segment_names(TABLE)
        if (m := manager.segment_metadata(TABLE, s)).status is SegmentStatus.DONE
        and m.download_url == ""
    ]


def test_a_failed_upload_is_served_by_peers_then_uploaded_by_the_healer(stack, topic):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(pauseless_config(topic))
    (stack.faults / "server.any.upload_fails").touch()
    producer = produce(topic, ROWS, rate=400)
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")

    (segment,) = wait_until(
        lambda: _peers_only(manager), timeout=300, interval=0.5, what="a segment on peers only"
    )
    assert not (stack.faults / "server.any.upload_fails").exists()
    store = deep_store()
    assert not store.exists(store.segment_key(RAW, segment))
    assert DurableCounter.value_of("segmentMissingDeepStoreLink", RAW) == 0

    # The committer went ONLINE with its own copy; the other replica fetched it from the peer.
    wait_until(
        lambda: (
            sorted(manager.externalview(TABLE).get(segment, {}).values()) == ["ONLINE", "ONLINE"]
        ),
        timeout=120,
        interval=0.5,
        what=f"{segment} ONLINE on both replicas",
    )
    fetched = [
        i for i in range(2) if re.search(rf"fetched {segment} from peer ", stack.log(f"server{i}"))
    ]
    failed = rf"{segment}: the deep-store upload failed .*peer:///{segment}"
    committed = [i for i in range(2) if re.search(failed, stack.log(f"server{i}"))]
    assert len(fetched) == 1 and len(committed) == 1 and fetched != committed, (fetched, committed)

    coverage = wait_until(
        lambda: all_committed(topic, TABLE), timeout=300, interval=1, what="all rows committed"
    )
    assert all(coverage[p][0] >= 1 for p in range(4)), coverage
    assert _peers_only(manager) == [segment]

    # The healer, as its Celery task runs it, but its clock past the guard of that DONE write.
    real = context.current()
    later = dataclasses.replace(real, now_ms=lambda: real.now_ms() + GUARD_MS + 1_000)
    healer = RealtimeSegmentValidationManager(later, HealingSettings(), deep_store=deep_store)
    report = healer.run_table(TABLE, run_id=uuid.uuid4().hex[:8], trigger="test")
    assert report.error is None, report.error
    (action,) = [a for a in report.actions if a.segment == segment]
    assert action.kind == "deepStoreUploaded", report.as_dict()
    assert manager.segment_metadata(TABLE, segment).download_url == (
        f"http://127.0.0.1:{stack.controller_port}/segments/{RAW}/{segment}"
    )
    assert store.exists(store.segment_key(RAW, segment))
    assert DurableCounter.value_of("llcSegmentsDeepStoreUploadRetrySuccess", RAW) == 1
    assert DurableCounter.value_of("llcSegmentsDeepStoreUploadRetryError", RAW) == 0

    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
    codes = stack.stop()
    assert all(code == 0 for code in codes.values()), codes
