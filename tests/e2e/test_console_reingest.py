"""Re-ingest from the console, in Debian's Chromium against the real stack: a controller (API and
pages), two servers with fault injection on, the Celery workers (Spark builds and the rebuild) and
`sync_zk --every 1`, all real processes.

A pauseless table's first segment of partition 0 reaches its row threshold while both servers
hold any commit between commit start and commit end (`server.<id>.commit_holds`): the segment
stays COMMITTING without a download URL, the next one consumes. An operator sees it under
"Committing / missing download URL", clicks Re-ingest (arm, confirm), reads the server's answer
(the job id and the server), and watches the request reach DONE on the page while the server
rebuilds `[startOffset, endOffset)` from the stream and completes the commit
(`POST /segments/reingested`). ZooKeeper then holds it DONE with its download URL, and its rows
are exactly the stream's (`verify_ledger --rows`). Screenshots: var/test[/slot-N]/artifacts/.
"""

from __future__ import annotations

import glob
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import SegmentStatus
from tables.models import AuditEntry, MirroredSegment
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tests.cluster_fixtures import github_rows, load
from tests.e2e.console_stack import ConsoleStack
from tests.e2e.test_console import (  # helpers, not tests
    ARTIFACTS,
    PAGE_MS,
    TABLE,
    _browser_page,
    _live,
    _login,
    _shot,
    _user,
)
from tests.ingest_cluster import table_config, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
SERVERS = 2
SEGMENT_ROWS = 50
REINGEST_MS = 240_000  # the rebuild waits for the Spark worker (its JVM may start first)


class HeldConsoleStack(ConsoleStack):
    """The console stack with fault injection on, in `faults`."""

    def __init__(self, zk_hosts: str, data_dir: Path, log_prefix: str, faults: Path) -> None:
        super().__init__(zk_hosts, data_dir, log_prefix)
        self.faults = faults

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "FAULT_INJECTION_DIR": str(self.faults)}

    def hold_commits(self, on: bool) -> None:
        for index in range(SERVERS):
            point = self.faults / f"server.{self.server_id(index)}.commit_holds"
            if on:
                point.write_text("")
            else:
                point.unlink(missing_ok=True)


@pytest.fixture
def stack(worker_zk, celery_workers, tmp_path, request) -> Iterator[HeldConsoleStack]:
    faults = tmp_path / "faults"
    faults.mkdir()
    name = request.node.name
    cluster = HeldConsoleStack(celery_workers.zk_hosts, tmp_path / "servers", name, faults)
    for old in cluster.log_dir.glob(f"{glob.escape(name)}-*.log"):
        old.unlink()
    try:
        cluster.start_controller()
        for index in range(SERVERS):
            cluster.start_server(index)
        wanted = {cluster.controller_id, *(cluster.server_id(i) for i in range(SERVERS))}
        wait_until(lambda: wanted <= _live(worker_zk), timeout=90, what="controller and servers")
        wait_until(cluster.serves_pages, timeout=60, what="the controller serving pages")
        cluster.start_mirror_sync(every=1.0)
        yield cluster
    finally:
        cluster.hold_commits(False)
        cluster.stop()


def _pauseless_config(topic: str) -> dict:
    rest = table_config(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS),
            "realtime.segment.flush.threshold.time": "6h",
        },
    )
    rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
    rest["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    return rest


def _mirrored_committing(segment: str) -> bool:
    found = MirroredSegment.objects.filter(table__name=TABLE, name=segment).first()
    return found is not None and found.status == "COMMITTING" and not found.download_url


def test_an_operator_reingests_a_segment_missing_its_download_url(
    stack, topic, worker_zk, django_user_model, new_context
):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    stack.hold_commits(True)
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(_pauseless_config(topic))
    segment = next(s for s in manager.idealstate(TABLE) if s.startswith("githubEvents__0__0__"))
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    admin.produce(topic, 0, github_rows()[:SEGMENT_ROWS], now_ms=int(time.time() * 1000))
    wait_until(
        lambda: manager.segment_metadata(TABLE, segment).status is SegmentStatus.COMMITTING,
        timeout=120,
        what="the first segment COMMITTING, its commit held",
    )
    wait_until(lambda: _mirrored_committing(segment), timeout=60, what="mirrored COMMITTING")
    _user(django_user_model, "otto", "operator")

    page = _browser_page(new_context, stack)
    _login(page, stack, "otto", "operator")
    page.goto(f"{stack.url}/ui/tables/{TABLE}/")
    row = page.locator(f'#deep-store-segments tr[data-segment="{segment}"]')
    expect(row).to_have_attribute("data-status", "COMMITTING")
    expect(row.locator('[data-field="next-step"]')).to_contain_text("waits until")
    expect(page.locator("#reingest-jobs-status")).to_contain_text(
        f"{SERVERS} of {SERVERS} server(s) answered", timeout=PAGE_MS
    )
    _shot(page, "reingest-committing")

    button = row.locator(".reingest-button")
    button.click()
    expect(button).to_have_text("Confirm re-ingest?")
    button.click()
    answer = row.locator(".reingest-answer")
    expect(answer).to_contain_text("started on Server_", timeout=PAGE_MS)
    audit = AuditEntry.objects.get(action="reingest")
    assert (audit.result, audit.source, audit.username) == ("OK", "page", "otto")
    job_id, server = audit.detail["jobId"], audit.detail["server"]
    expect(answer).to_have_text(f"job {job_id} started on {server}")
    _shot(page, "reingest-started")

    request = page.locator(f'#reingest-requests tr[data-job-id="{job_id}"]')
    expect(request).to_have_attribute("data-segment", segment, timeout=PAGE_MS)
    expect(request).to_have_attribute("data-status", "DONE", timeout=REINGEST_MS)
    expect(request).to_have_attribute("data-done", "true")
    expect(page.locator(f'#deep-store-segments tr[data-segment="{segment}"]')).to_have_count(
        0, timeout=PAGE_MS
    )
    _shot(page, "reingest-done")

    meta = manager.segment_metadata(TABLE, segment)
    assert meta.status is SegmentStatus.DONE and meta.download_url, meta
    stack.hold_commits(False)
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
