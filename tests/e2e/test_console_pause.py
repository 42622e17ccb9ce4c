"""Pause and resume from the console, in Debian's Chromium against the real stack.

An operator clicks Pause on the table page, gives a reason and watches the job panel reach 100 %
(every consuming segment committed, as ZooKeeper confirms); rows are produced while paused; then
Resume (lastConsumed) restarts consumption: the page shows new consuming segments that read the
rows produced during the pause, at the offsets the servers report. Screenshots go to
var/test/artifacts/.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import consuming_segments
from tables.models import AuditEntry
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.e2e.test_console import (  # helpers and the `stack` fixture, not tests
    ARTIFACTS,
    COMMIT_MS,
    FLUSH_TIME,
    PAGE_MS,
    PARTITIONS,
    SEGMENT_ROWS,
    TABLE,
    _browser_page,
    _check_replica_offsets,
    _login,
    _mirror_caught_up,
    _segments,
    _servers_caught_up,
    _shot,
    _user,
    stack,  # noqa: F401 - the fixture
)
from tests.ingest_cluster import produce, table_config
from tests.poll import wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
REASON = "console e2e: swap the topic"


def _produce(topic: str, rows: int) -> None:
    producer = produce(topic, rows, rate=2_000)
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")


def test_operator_pauses_watches_the_job_and_resumes(
    stack,  # noqa: F811
    topic,
    worker_zk,
    django_user_model,
    new_context,
):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        table_config(
            topic,
            **{
                "realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS),
                "realtime.segment.flush.threshold.time": FLUSH_TIME,
            },
        )
    )
    _produce(topic, 400)
    stream = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
    latest = {p: stream.latest_offset(p) for p in range(PARTITIONS)}
    first = _segments(manager, 0)
    wait_until(lambda: _servers_caught_up(stack, first, latest), timeout=180, what="consumed")
    servers = sorted(stack.server_id(i) for i in range(2))
    wait_until(lambda: _mirror_caught_up(first, latest, servers), timeout=120, what="mirrored")
    _user(django_user_model, "otto", "operator")

    page = _browser_page(new_context, stack)
    _login(page, stack, "otto", "operator")
    page.goto(f"{stack.url}/ui/tables/{TABLE}/")
    expect(page.locator("#pause-state")).to_have_attribute("data-paused", "false")
    for partition, segment in first.items():  # the dialog lists what a pause will commit
        row = page.locator(f'#pause-affected tr[data-partition="{partition}"]')
        expect(row).to_have_attribute("data-segment", segment, timeout=PAGE_MS)

    # Pause: the job panel goes to 100 % once every consuming segment is committed.
    page.click("#pause-button")
    expect(page.locator("#pause-dialog")).to_be_visible()
    page.fill("#pause-reason", REASON)
    _shot(page, "pause-dialog")
    page.click("#pause-submit")
    panel = page.locator("#pause-job")
    expect(panel).to_be_visible()
    expect(panel.locator("li[data-segment]")).to_have_count(PARTITIONS)
    expect(panel).to_have_attribute("data-state", "done", timeout=COMMIT_MS)
    expect(panel).to_have_attribute("data-percent", "100")
    expect(panel.locator('li[data-state="committed"]')).to_have_count(PARTITIONS)
    _shot(page, "pause-job-done")
    ideal = read_record(worker_zk, PATHS.idealstate(TABLE))
    assert ideal is not None and consuming_segments(ideal.record) == []
    for partition, segment in first.items():
        meta = manager.segment_metadata(TABLE, segment)
        assert meta.status == "DONE" and meta.end_offset == str(latest[partition]), meta
    expect(page.locator("#pause-state")).to_have_attribute("data-paused", "true", timeout=PAGE_MS)
    expect(page.locator("#pause-state")).to_contain_text("otto")
    expect(page.locator("#pause-state")).to_contain_text(REASON)
    pause = AuditEntry.objects.get(username="otto", action="pause")
    assert (pause.result, pause.source, pause.reason) == ("OK", "page", REASON)

    # Rows produced while paused are consumed after a lastConsumed resume.
    _produce(topic, 200)
    latest = {p: stream.latest_offset(p) for p in range(PARTITIONS)}
    page.click("#resume-button")
    expect(page.locator("#resume-dialog")).to_be_visible()
    expect(page.locator('input[name=consumeFrom][value="lastConsumed"]')).to_be_checked()
    page.fill("#resume-reason", "new topic in place")
    _shot(page, "resume-dialog")
    page.click("#resume-submit")
    expect(panel).to_have_attribute("data-state", "resumed")
    second = _segments(manager, 1)
    assert sorted(second) == list(range(PARTITIONS))
    offsets = wait_until(
        lambda: _servers_caught_up(stack, second, latest),
        timeout=180,
        interval=0.5,
        what="the new segments consumed the rows produced during the pause",
    )
    expect(page.locator("#pause-state")).to_have_attribute("data-paused", "false", timeout=PAGE_MS)
    _check_replica_offsets(page, offsets, second, latest)
    for partition, segment in second.items():
        assert manager.segment_metadata(TABLE, segment).start_offset == str(
            manager.segment_metadata(TABLE, first[partition]).end_offset
        )
    _shot(page, "resumed")
    resume = AuditEntry.objects.get(username="otto", action="resume")
    assert resume.result == "OK" and resume.detail["dataLoss"] == 0
