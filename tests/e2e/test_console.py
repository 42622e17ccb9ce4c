"""The console in Debian's Chromium against the real stack: a controller (API and pages), two
servers, the Celery workers (Spark builds) and `sync_zk --every 1`, all real processes.

A 4-partition table (replication 2) gets a fixed number of rows, far below the flush threshold,
and consumes them all. Then:
- a viewer logs in and walks overview -> table -> partition -> segment by clicking links; every
  replica's current offset on the table and partition pages equals what that server's
  `/tables/<t>/consumingSegmentsInfo` reports, the upstream offset equals the stream's latest,
  and the segment page's status, offsets, ZK metadata and per-replica IdealState/ExternalView
  states equal ZooKeeper's. The viewer has no Force commit button, and the API refuses the
  viewer's force commit (403), audits it DENIED and writes nothing to ZooKeeper;
- an operator walks overview -> tables -> table, force commits from the dialog with a reason and
  watches the job finish; each partition's new CONSUMING segment shows on the page, the offsets
  still match the servers, the committed segment's page matches its DONE metadata in ZooKeeper,
  and the audit log page shows the OK entry with the reason (and the viewer's DENIED one).
Screenshots of every page visited go to var/test[/slot-N]/artifacts/console-*.png.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from kazoo.client import KazooClient
from playwright.sync_api import BrowserContext, Page, expect

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.models import AuditEntry, PartitionStatus
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider
from tables.zk import messages
from tables.zk.records import read_record
from tests import envdefaults
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, load
from tests.e2e.console_stack import ConsoleStack
from tests.ingest_cluster import admin_get, produce, table_config
from tests.poll import wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"
RAW = "githubEvents"
PARTITIONS = 4  # `produce` writes the topic's 4 partitions
SERVERS = 2
ROWS = 400  # far below the flush threshold: nothing commits unless forced
SEGMENT_ROWS = 100_000
FLUSH_TIME = "6h"
PASSWORD = "a-long-test-password"
REASON = "console e2e: roll the consuming segments"
ARTIFACTS = Path(envdefaults.VAR_DIR) / "artifacts"
# Milliseconds. Pages refresh every 5 s and the mirror syncs every second, on 2 shared CPUs; a
# force commit waits for Spark builds (the first one starts a JVM).
PAGE_MS = 60_000
COMMIT_MS = 400_000
NONE = "\N{EN DASH}"  # what the pages show for a missing value

Offsets = dict[int, tuple[str, int, int, int]]  # partition -> (segment, current, upstream, lag)


def _live(zk: KazooClient) -> set[str]:
    return set(zk.get_children(PATHS.liveinstances)) if zk.exists(PATHS.liveinstances) else set()


@pytest.fixture
def stack(worker_zk, celery_workers, tmp_path, request) -> Iterator[ConsoleStack]:
    """A controller, two servers and the mirror sync, in the workers' ZooKeeper chroot."""
    cluster = ConsoleStack(celery_workers.zk_hosts, tmp_path / "servers", request.node.name)
    # Fresh logs for each run; the node name has "[chromium]" in it, which glob must not parse.
    for old in cluster.log_dir.glob(f"{glob.escape(request.node.name)}-*.log"):
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
        cluster.stop()


# --- the cluster's side ---------------------------------------------------------------------


def _segments(manager: ResourceManager, sequence: int) -> dict[int, str]:
    """Partition -> its segment with this sequence number, from the IdealState."""
    out = {}
    for segment in manager.idealstate(TABLE):
        name = LLCSegmentName.parse(segment)
        if name is not None and name.sequence_number == sequence:
            out[name.partition_group_id] = segment
    return out


def _server_offsets(stack: ConsoleStack, index: int) -> Offsets | None:
    """What server `index` reports in its consumingSegmentsInfo (None while it cannot say)."""
    try:
        items = admin_get(
            stack.server_ports[f"server{index}"], f"/tables/{TABLE}/consumingSegmentsInfo"
        )
    except OSError:  # not hosting the table yet (404), or not answering
        return None
    out: Offsets = {}
    for item in items if isinstance(items, list) else []:
        info = item["partitionOffsetInfo"]
        (partition,) = info["currentOffsets"]
        out[int(partition)] = (
            item["segmentName"],
            int(info["currentOffsets"][partition]),
            int(info["latestUpstreamOffsets"][partition]),
            int(info["recordsLag"][partition]),
        )
    return out


def _servers_caught_up(
    stack: ConsoleStack, segments: dict[int, str], latest: dict[int, int]
) -> dict[str, Offsets] | None:
    """Every server's offsets once each consumes `segments` and has read up to `latest`."""
    out = {}
    for index in range(SERVERS):
        offsets = _server_offsets(stack, index)
        if offsets is None:
            return None
        for partition, segment in segments.items():
            if offsets.get(partition) != (segment, latest[partition], latest[partition], 0):
                return None
        out[stack.server_id(index)] = offsets
    return out


def _mirror_caught_up(segments: dict[int, str], latest: dict[int, int], servers: list[str]) -> bool:
    """True once the mirror's PartitionStatus rows hold what the servers report."""
    rows = {row.partition: row for row in PartitionStatus.objects.filter(table__name=TABLE)}
    if sorted(rows) != sorted(segments):
        return False
    for partition, row in rows.items():
        if row.consuming_segment != segments[partition] or sorted(row.replicas) != servers:
            return False
        for replica in row.replicas.values():
            if replica.get("currentOffset") != latest[partition]:
                return False
    return True


def _force_commit_messages(zk: KazooClient) -> list[tuple[str, Any]]:
    """Every FORCE_COMMIT message waiting under INSTANCES/*/MESSAGES."""
    out = []
    for instance in zk.get_children(PATHS.instances):
        for msg_id in messages.message_ids(zk, PATHS, instance):
            record = messages.read_message(zk, PATHS, instance, msg_id)
            request = None if record is None else messages.parse_force_commit(record)
            if request is not None:
                out.append((instance, request))
    return out


def _zk_state(zk: KazooClient, manager: ResourceManager) -> dict[str, Any]:
    """What a force commit would change: IdealState, segment metadata, job record, messages."""
    ideal = read_record(zk, PATHS.idealstate(TABLE))
    assert ideal is not None
    metadata = {}
    for segment in manager.segment_names(TABLE):
        found = read_record(zk, PATHS.segment(TABLE, segment))
        metadata[segment] = None if found is None else (found.version, found.record.simple_fields)
    return {
        "idealstate": (ideal.version, ideal.record.map_fields),
        "metadata": metadata,
        "jobs": zk.exists(PATHS.controller_jobs("FORCE_COMMIT")) is not None,
        "messages": _force_commit_messages(zk),
    }


# --- the browser's side ---------------------------------------------------------------------


def _user(django_user_model, username: str, role: str):
    user = django_user_model.objects.create_user(username, password=PASSWORD)
    grant(user, role)
    return user


def _browser_page(new_context, stack: ConsoleStack) -> Page:
    browser_context: BrowserContext = new_context(base_url=stack.url)
    browser_context.set_default_timeout(PAGE_MS)
    return browser_context.new_page()


def _shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"console-{name}.png"), full_page=True)


def _login(page: Page, stack: ConsoleStack, username: str, role: str) -> None:
    page.goto(stack.url + "/")
    expect(page).to_have_url(stack.url + "/login/?next=/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(stack.url + "/", timeout=PAGE_MS)
    expect(page.locator("#current-user")).to_have_text(username)
    expect(page.locator("#current-role")).to_have_attribute("data-role", role)


def _check_common(page: Page) -> None:
    """The status bar every page has: a fresh mirror, auto refresh on."""
    expect(page.locator("#mirror-status")).to_have_attribute("data-stale", "false", timeout=PAGE_MS)
    expect(page.locator("#refresh-status")).to_have_attribute("data-state", "on", timeout=PAGE_MS)


def _check_overview(page: Page, first: dict[int, str]) -> None:
    counters = page.locator("#counters")
    expect(counters.locator("[data-counter=live_servers] dd")).to_have_text(
        f"{SERVERS} of {SERVERS}", timeout=PAGE_MS
    )
    expect(counters.locator("[data-counter=live_controllers] dd")).to_have_text("1 of 1")
    expect(counters.locator("[data-counter=missing_consuming] dd")).to_have_text("0")
    expect(counters.locator("[data-counter=error_segments] dd")).to_have_text("0")
    expect(page.locator(f'#triage tr[data-table="{TABLE}"]')).to_have_count(PARTITIONS)
    for partition, segment in first.items():
        row = page.locator(f'#triage tr[data-table="{TABLE}"][data-partition="{partition}"]')
        expect(row).to_have_attribute("data-records-lag", "0", timeout=PAGE_MS)
        expect(row).to_have_attribute("data-health", "GOOD", timeout=PAGE_MS)
        expect(row.get_by_role("link", name=segment)).to_be_visible()


def _check_replica_offsets(
    page: Page,
    offsets: dict[str, Offsets],
    segments: dict[int, str],
    latest: dict[int, int],
    partitions: list[int] | None = None,
) -> None:
    """The partitions table (table page, or the partition page with `partitions` = [it]) against
    what each server reports in its consumingSegmentsInfo."""
    for partition in segments if partitions is None else partitions:
        link = page.locator(f'#partitions tbody[data-partition="{partition}"] a[data-link=segment]')
        expect(link).to_have_text(segments[partition], timeout=PAGE_MS)
        for server, reported in offsets.items():
            segment, current, upstream, lag = reported[partition]
            assert segment == segments[partition] and upstream == latest[partition], reported
            row = page.locator(
                f'#partitions tr[data-partition="{partition}"][data-server="{server}"]'
            )
            expect(row).to_have_attribute("data-state", "CONSUMING", timeout=PAGE_MS)
            expect(row.locator("[data-current-offset]")).to_have_attribute(
                "data-current-offset", str(current), timeout=PAGE_MS
            )
            expect(row.locator("[data-upstream-offset]")).to_have_attribute(
                "data-upstream-offset", str(latest[partition])
            )
            expect(row.locator("[data-records-lag]")).to_have_attribute(
                "data-records-lag", str(lag)
            )


def _check_segment_page(
    page: Page, zk: KazooClient, manager: ResourceManager, segment: str
) -> None:
    """The segment page against ZooKeeper: status, offsets, every metadata field, replicas."""
    expect(page.locator("#segment-name")).to_have_attribute("data-segment", segment)
    meta = manager.segment_metadata(TABLE, segment)
    found = read_record(zk, PATHS.segment(TABLE, segment))
    assert found is not None
    simple = found.record.simple_fields
    summary = page.locator("#segment-summary")
    expect(summary.locator("dd[data-field=status]")).to_have_text(str(meta.status), timeout=PAGE_MS)
    expect(summary.locator("dd[data-field=start-offset]")).to_have_text(meta.start_offset or NONE)
    expect(summary.locator("dd[data-field=end-offset]")).to_have_text(meta.end_offset or NONE)
    expect(summary.locator("dd[data-field=total-docs]")).to_have_attribute(
        "data-value", "" if meta.total_docs is None else str(meta.total_docs)
    )
    rows = page.locator("#segment-metadata tr[data-key]")
    expect(rows).to_have_count(len(simple), timeout=PAGE_MS)
    for key, value in simple.items():
        expect(page.locator(f'#segment-metadata tr[data-key="{key}"] td')).to_have_text(value)

    ideal = manager.idealstate(TABLE)[segment]
    external = manager.externalview(TABLE).get(segment, {})
    replicas = page.locator("#segment-replicas tr[data-server]")
    expect(replicas).to_have_count(len(set(ideal) | set(external)))
    for server in sorted(set(ideal) | set(external)):
        row = page.locator(f'#segment-replicas tr[data-server="{server}"]')
        expect(row).to_have_attribute("data-ideal", ideal.get(server, ""))
        expect(row).to_have_attribute("data-external", external.get(server, ""), timeout=PAGE_MS)


# --- the test -------------------------------------------------------------------------------


def test_viewer_and_operator_walk_the_console_against_servers_and_zookeeper(
    stack, topic, worker_zk, django_user_model, new_context
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
    producer = produce(topic, ROWS, rate=2_000)
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")
    stream = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
    latest = {p: stream.latest_offset(p) for p in range(PARTITIONS)}
    servers = sorted(stack.server_id(i) for i in range(SERVERS))
    first = _segments(manager, 0)
    assert sorted(first) == list(range(PARTITIONS))
    offsets = wait_until(
        lambda: _servers_caught_up(stack, first, latest),
        timeout=180,
        interval=0.5,
        what="both servers consumed every row",
    )
    wait_until(
        lambda: _mirror_caught_up(first, latest, servers),
        timeout=120,
        interval=0.5,
        what="the mirror shows every row consumed",
    )
    _user(django_user_model, "vera", "viewer")
    _user(django_user_model, "otto", "operator")

    # --- the viewer: overview -> table -> partition -> segment, by clicking ---
    page = _browser_page(new_context, stack)
    _login(page, stack, "vera", "viewer")
    _check_common(page)
    _check_overview(page, first)
    _shot(page, "viewer-overview")

    page.locator(f'#triage tr[data-table="{TABLE}"][data-partition="0"] th a').click()
    expect(page).to_have_url(f"{stack.url}/ui/tables/{TABLE}/")
    expect(page.locator("#table-name")).to_have_attribute("data-table", TABLE)
    _check_common(page)
    expect(page.locator("#partitions tbody[data-partition]")).to_have_count(PARTITIONS)
    _check_replica_offsets(page, offsets, first, latest)
    for segment in first.values():
        expect(page.locator(f'#segments tr[data-segment="{segment}"]')).to_have_attribute(
            "data-display-state", "CONSUMING", timeout=PAGE_MS
        )
    expect(page.locator("#pause-state")).to_have_attribute("data-paused", "false")
    expect(page.locator("#force-commit-button")).to_have_count(0)
    expect(page.locator("#force-commit-dialog")).to_have_count(0)
    _shot(page, "viewer-table")

    page.locator('#partitions tbody[data-partition="0"] a[data-link=partition]').click()
    expect(page).to_have_url(f"{stack.url}/ui/tables/{TABLE}/partitions/0/")
    expect(page.locator("#partition-title")).to_have_attribute("data-partition", "0")
    _check_common(page)
    _check_replica_offsets(page, offsets, first, latest, partitions=[0])
    _shot(page, "viewer-partition")

    page.locator('#partitions tbody[data-partition="0"] a[data-link=segment]').click()
    expect(page).to_have_url(f"{stack.url}/ui/tables/{TABLE}/segments/{first[0]}/")
    _check_common(page)
    _check_segment_page(page, worker_zk, manager, first[0])
    _shot(page, "viewer-segment")

    # The API refuses the viewer's force commit (the page's own session and CSRF token).
    before = _zk_state(worker_zk, manager)
    assert not before["jobs"] and not before["messages"], before
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    reply = page.request.post(
        f"{stack.url}/tables/{RAW}/forceCommit?comment=viewer+tries",
        headers={"X-CSRFToken": csrf, "Accept": "application/json"},
    )
    assert reply.status == 403, reply.text()
    assert reply.json()["code"] == 403, reply.text()
    denied = AuditEntry.objects.get(username="vera", action="force_commit")
    assert denied.result == AuditEntry.Result.DENIED
    assert (denied.status_code, denied.role, denied.target) == (403, "viewer", TABLE)
    assert denied.reason == "viewer tries"
    assert _zk_state(worker_zk, manager) == before
    assert _servers_caught_up(stack, first, latest) is not None  # still consuming the same

    # --- the operator: overview -> tables -> table, force commit from the dialog ---
    page = _browser_page(new_context, stack)
    _login(page, stack, "otto", "operator")
    _check_common(page)
    page.click("#nav a[data-nav=tables]")
    expect(page).to_have_url(f"{stack.url}/ui/tables/")
    expect(page.locator(f'#tables tr[data-table="{TABLE}"]')).to_have_attribute(
        "data-health", "GOOD", timeout=PAGE_MS
    )
    _shot(page, "operator-tables")
    page.locator(f'#tables tr[data-table="{TABLE}"] th a').click()
    expect(page).to_have_url(f"{stack.url}/ui/tables/{TABLE}/")
    _check_replica_offsets(page, offsets, first, latest)

    expect(page.locator("#force-commit-button")).to_be_visible()
    page.click("#force-commit-button")
    expect(page.locator("#force-commit-dialog")).to_be_visible()
    page.fill("#force-commit-reason", REASON)
    _shot(page, "operator-force-commit-dialog")
    page.click("#force-commit-submit")
    job = page.locator("#force-commit-job")
    expect(job).to_be_visible()
    expect(job).to_have_attribute("data-state", "done", timeout=COMMIT_MS)
    expect(job).to_have_attribute("data-remaining", "0")
    job_id = job.get_attribute("data-job-id")
    assert job_id

    ok = AuditEntry.objects.get(username="otto", action="force_commit")
    assert ok.result == AuditEntry.Result.OK
    assert (ok.status_code, ok.role, ok.target, ok.source) == (200, "operator", TABLE, "page")
    assert ok.reason == REASON and ok.detail["jobId"] == job_id
    assert sorted(ok.detail["segments"]) == sorted(first.values())

    # Every partition moved on: its first segment is DONE at the stream's end, the next consumes.
    for partition, segment in first.items():
        meta = manager.segment_metadata(TABLE, segment)
        assert meta.status == "DONE" and meta.end_offset == str(latest[partition]), meta
    second = wait_until(
        lambda: (found := _segments(manager, 1)) and len(found) == PARTITIONS and found,
        timeout=60,
        what="a new consuming segment per partition",
    )
    offsets = wait_until(
        lambda: _servers_caught_up(stack, second, latest),
        timeout=180,
        interval=0.5,
        what="both servers consuming the new segments",
    )
    _check_replica_offsets(page, offsets, second, latest)
    for partition in first:
        segments = page.locator("#segments")
        expect(segments.locator(f'tr[data-segment="{second[partition]}"]')).to_have_attribute(
            "data-display-state", "CONSUMING", timeout=PAGE_MS
        )
        expect(segments.locator(f'tr[data-segment="{first[partition]}"]')).to_have_attribute(
            "data-display-state", "ONLINE", timeout=PAGE_MS
        )
    _shot(page, "operator-table-after-commit")

    page.locator('#partitions tbody[data-partition="0"] a[data-link=partition]').click()
    expect(page).to_have_url(f"{stack.url}/ui/tables/{TABLE}/partitions/0/")
    _check_replica_offsets(page, offsets, second, latest, partitions=[0])
    _shot(page, "operator-partition")

    page.locator(f'#segments tr[data-segment="{first[0]}"] a[data-link=segment]').click()
    expect(page).to_have_url(f"{stack.url}/ui/tables/{TABLE}/segments/{first[0]}/")
    _check_segment_page(page, worker_zk, manager, first[0])
    expect(page.locator("#display-state")).to_have_attribute("data-display-state", "ONLINE")
    _shot(page, "operator-segment")

    page.click("#nav a[data-nav=audit]")
    expect(page).to_have_url(f"{stack.url}/ui/audit/")
    audit = page.locator("#audit")
    done = audit.locator('tr[data-user="otto"][data-action="force_commit"][data-result="OK"]')
    expect(done).to_have_count(1)
    expect(done).to_have_attribute("data-target", TABLE)
    expect(done).to_contain_text(REASON)
    refused = audit.locator(
        'tr[data-user="vera"][data-action="force_commit"][data-result="DENIED"]'
    )
    expect(refused).to_have_count(1)
    expect(refused).to_contain_text("viewer tries")
    _shot(page, "operator-audit")

    # Back on the table page: its configuration summary and "Recent operator actions" (with
    # their "all" link) against ZooKeeper's table config and the audit log. Every failure here
    # is reported together, so that one does not hide another.
    page.click("#nav a[data-nav=tables]")
    page.locator(f'#tables tr[data-table="{TABLE}"] th a').click()
    expect(page).to_have_url(f"{stack.url}/ui/tables/{TABLE}/")
    _shot(page, "operator-table-summaries")

    def flush_threshold() -> None:
        expect(page.locator("#table-summary dd[data-field=flush]")).to_have_text(
            f"{SEGMENT_ROWS} rows \N{MIDDLE DOT} time {FLUSH_TIME}"
        )

    def recent_actions() -> None:
        expect(page.locator("#recent-actions")).to_contain_text(REASON)

    def all_actions_link() -> None:
        page.locator("#actions-title a").click()
        expect(page).to_have_url(re.compile(r"/ui/audit/\?target="))
        rows = page.locator('#audit tr[data-action="force_commit"][data-result="OK"]')
        expect(rows).to_have_count(1)

    problems = []
    for check in (flush_threshold, recent_actions, all_actions_link):
        try:
            check()
        except AssertionError as exc:
            problems.append(f"{check.__name__}: {exc}")
    assert not problems, "\n\n".join(problems)
