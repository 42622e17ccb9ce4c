"""Several controllers, end to end: 3 controllers, 3 servers, Celery workers (Spark builds) and a
producer per table, as real processes; leadControllerResource split 8/8/8 and followed through a
kill -9, a SIGTERM and a SIGSTOP past the session timeout.

Two tables on one-partition topics (replication 2) are named so that different controllers lead
them: "victim" (the controller leading it is the one hurt) and "bystander". The scenarios run in
order on one stack:
(a) kill -9 the victim's leader while a victim segment is committing (delay 0): the partitions
    move and the victim commits again; then, with a 20 s rebalance delay, kill -9 the new leader:
    the mirror, the console's leader page and /metrics show the leaderless partition until it
    moves, while (d) the bystander keeps committing;
(b) SIGTERM the victim's leader during a commit, with a 300 s delay: its partitions move at once;
(c) SIGSTOP the victim's leader past its session timeout (delay 0): another controller takes the
    partitions and commits; after SIGCONT the stopped one has dropped its leadership and answers
    NOT_LEADER;
(e) a lead controller exits between commit steps 1 and 2 (fault injection): the table's new lead
    controller's takeover healing run (trigger "leader", HEALING_TRIGGER_ON_LEADERSHIP on here)
    finishes that commit at once, where the guard alone would wait 5 minutes.
Every controller logs each commit ("committed <segment> at offset ..."); no segment is committed
twice, by one controller or two (a commit finished by a takeover run is not logged by any), and
both tables end with `verify_ledger --rows` clean.
Figures (failover times) go to var/test[/slot-N]/artifacts/failover.txt; nothing asserts on them.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.lead_assignment import masters_of
from tables.domain.leadership import lead_partition, partition_name
from tables.domain.segment_metadata import SegmentStatus
from tables.domain.table_config import switch_stream_type
from tables.models import HealingRun
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tables.zk.records import read_record, update_record
from tests import envdefaults
from tests.cluster_fixtures import PATHS, load
from tests.e2e.conftest import live
from tests.ingest_cluster import HOST, IngestCluster, find_phase, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
LEAD = "leadControllerResource"
CONTROLLERS = 3
RATE = 50  # rows/s per table
SEGMENT_ROWS = 150  # a commit every ~3 s per table
FIGURES = Path(envdefaults.VAR_DIR) / "artifacts" / "failover.txt"
PASSWORD = "a-long-test-password"
COMMITTED = re.compile(r"committed (\S+) at offset")
CONTROLLER_ENV = {
    "LEAD_CONTROLLER_REBALANCE_DELAY_MS": "0",
    "HEALING_TRIGGER_ON_LEADERSHIP": "true",
}


# --- reads ------------------------------------------------------------------------------------
def masters(zk) -> dict[int, str | None]:
    view = read_record(zk, PATHS.externalview(LEAD))
    return masters_of(view.record if view else None, 24)


def leader_of(zk, raw: str) -> str | None:
    return masters(zk)[lead_partition(raw)]


def done(table: str) -> set[str]:
    manager = ResourceManager(context.current())
    return {
        s
        for s in manager.segment_names(table)
        if manager.segment_metadata(table, s).status is SegmentStatus.DONE
    }


def committed_to_end(topic: str, table: str) -> bool:
    latest = RedisStreamProvider(get_redis(context.current().redis_url), topic).latest_offset(0)
    manager = ResourceManager(context.current())
    ends = [int(manager.segment_metadata(table, s).end_offset or 0) for s in done(table)]
    return bool(ends) and max(ends) == latest


def balanced(zk, controllers: set[str]) -> bool:
    counts = Counter(m for m in masters(zk).values() if m)
    return set(counts) == controllers and sorted(counts.values()) == [8] * len(controllers)


def set_delay(zk, delay_ms: int) -> None:
    def put(record):
        record.simple_fields["REBALANCE_DELAY"] = str(delay_ms)
        return record

    update_record(zk, PATHS.idealstate(LEAD), put)


def figure(text: str) -> None:
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES.open("a") as out:
        out.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")


# --- the stack --------------------------------------------------------------------------------
class Stack:
    def __init__(self, cluster: IngestCluster, zk, faults: Path) -> None:
        self.cluster, self.zk, self.faults = cluster, zk, faults
        self.index = {cluster.controller_id_of(i): i for i in range(CONTROLLERS)}
        self.topics: dict[str, str] = {}
        self.producers: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        return {**CONTROLLER_ENV, "FAULT_INJECTION_DIR": str(self.faults)}

    def proc(self, controller: str) -> subprocess.Popen:
        return self.cluster.procs[self.cluster.controller_name(self.index[controller])]

    def restart(self, controller: str) -> None:
        self.cluster.start_controller(self.index[controller], self.env)
        wait_until(lambda: balanced(self.zk, set(self.index)), timeout=90, what="8/8/8 again")

    def add_table(self, raw: str) -> str:
        topic = f"{raw}-{uuid.uuid4().hex[:8]}"
        RedisTopicAdmin(get_redis(context.current().redis_url)).create_topic(topic, 1)
        rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
        rest["tableName"] = raw
        rest["segmentsConfig"]["replication"] = "2"
        rest["segmentsConfig"]["schemaName"] = "githubEvents"
        stream = rest["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"][0]
        stream.pop("realtime.segment.flush.threshold.size", None)
        stream["realtime.segment.flush.threshold.segment.rows"] = str(SEGMENT_ROWS)
        stream["realtime.segment.flush.threshold.time"] = "10s"
        ResourceManager(context.current()).add_table(rest)
        self.topics[raw] = topic
        schema = envdefaults.PINOT_FIXTURES / "githubEvents_schema.json"
        args = ["produce", "--topic", topic, "--partitions", "1", "--rate", str(RATE)]
        args += ["--schema", str(schema), "--count", str(RATE * 900)]
        self.producers.append(
            subprocess.Popen(
                [sys.executable, "manage.py", *args],
                cwd=envdefaults.ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        return f"{raw}_REALTIME"

    def commits_of(
        self, table: str, after: set[str], count: int = 1, timeout: float = 120
    ) -> set[str]:
        return wait_until(
            lambda: (new := done(table) - after) and len(new) >= count and new,
            timeout=timeout,
            interval=0.2,
            what=f"{count} new commit(s) of {table}",
        )

    def committing(self, table: str) -> None:
        wait_until(
            lambda: find_phase(self.cluster, table, "COMMITTING"),
            timeout=120,
            interval=0.05,
            what=f"a replica of {table} COMMITTING",
        )

    def moved(self, raw: str, away_from: str, timeout: float) -> str:
        return wait_until(
            lambda: (m := leader_of(self.zk, raw)) not in (None, away_from) and m,
            timeout=timeout,
            interval=0.05,
            what=f"{raw}'s partition led by a controller other than {away_from}",
        )


def pick_names(zk) -> tuple[str, str]:
    """Two raw table names whose lead partitions have different MASTERs."""
    current = masters(zk)
    first = "victim0"
    for i in range(200):
        other = f"bystander{i}"
        if current[lead_partition(other)] != current[lead_partition(first)]:
            return first, other
    raise AssertionError("no second table name on another controller")


@pytest.fixture
def stack(worker_zk, celery_workers, tmp_path, request) -> Iterator[Stack]:
    cluster = IngestCluster(celery_workers.zk_hosts, tmp_path / "servers", request.node.name)
    for old in cluster.log_dir.glob(f"{request.node.name}-*.log"):
        old.unlink()
    faults = tmp_path / "faults"
    faults.mkdir()
    stack = Stack(cluster, worker_zk, faults)
    for index in range(CONTROLLERS):
        cluster.start_controller(index, stack.env)
    for index in range(3):
        cluster.start_server(index)
    wanted = {*stack.index, *(cluster.server_id(i) for i in range(3))}
    wait_until(lambda: wanted <= live(worker_zk), timeout=90, what="3 controllers, 3 servers")
    ResourceManager(context.current()).add_schema(load("githubEvents_schema.json"))
    try:
        yield stack
    finally:
        for producer in stack.producers:
            producer.kill()
            producer.wait()
        admin = RedisTopicAdmin(get_redis(context.current().redis_url))
        for topic in stack.topics.values():
            admin.delete_topic(topic)
        for proc in cluster.procs.values():  # a SIGSTOPped one must be able to stop
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        cluster.stop()


# --- the test ---------------------------------------------------------------------------------
def test_leadership_is_split_moves_on_failures_and_no_segment_is_committed_twice(
    stack, worker_zk, client, django_user_model
):
    zk, cluster = worker_zk, stack.cluster
    wait_until(lambda: balanced(zk, set(stack.index)), timeout=60, what="24 partitions 8/8/8")
    victim_raw, bystander_raw = pick_names(zk)
    victim, bystander = stack.add_table(victim_raw), stack.add_table(bystander_raw)

    # GET /leader/tables (Pinot's JSON) on any controller: 8/8/8, each table under its partition.
    oncall = django_user_model.objects.create_user("oncall", password=PASSWORD)
    basic = base64.b64encode(f"oncall:{PASSWORD}".encode()).decode()
    request = urllib.request.Request(
        f"http://{HOST}:{cluster.controller_port}/leader/tables",
        headers={"Authorization": f"Basic {basic}"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        answer = json.loads(reply.read())
    entries = answer["leadControllerEntryMap"]
    assert answer["leadControllerResourceEnabled"] is True and len(entries) == 24
    assert sorted(Counter(e["leadControllerId"] for e in entries.values()).values()) == [8, 8, 8]
    for raw, table in ((victim_raw, victim), (bystander_raw, bystander)):
        entry = entries[partition_name(lead_partition(raw))]
        assert table in entry["tableNames"] and entry["leadControllerId"] == leader_of(zk, raw)
    stack.commits_of(victim, set(), 1)
    stack.commits_of(bystander, set(), 1)

    # (a) and (d), with a 20 s delay: kill -9 the victim's leader during a commit; the victim has
    # no leader until the delay runs out (shown by the mirror, the page and /metrics), while the
    # bystander, led by another controller, keeps committing.
    set_delay(zk, 20_000)
    first = leader_of(zk, victim_raw)
    assert leader_of(zk, bystander_raw) not in (None, first)
    stack.committing(victim)
    before_victim, before_bystander = done(victim), done(bystander)
    stack.proc(first).send_signal(signal.SIGKILL)
    stack.proc(first).wait()
    wait_until(lambda: leader_of(zk, victim_raw) is None, timeout=60, what="victim leaderless")
    _shows_leaderless(client, oncall, lead_partition(victim_raw), victim)
    stack.commits_of(bystander, before_bystander, 2, timeout=60)
    assert leader_of(zk, victim_raw) is None  # still within the delay
    stack.moved(victim_raw, first, timeout=60)
    stack.commits_of(victim, before_victim, 2)
    set_delay(zk, 0)
    stack.restart(first)

    # (a) with delay 0: kill -9 the victim's leader during a commit; the partitions move as soon
    # as its session expires and the victim commits again.
    second = leader_of(zk, victim_raw)
    stack.committing(victim)
    before = done(victim)
    killed_at = time.monotonic()
    stack.proc(second).send_signal(signal.SIGKILL)
    stack.proc(second).wait()
    stack.moved(victim_raw, second, timeout=60)
    moved_s = time.monotonic() - killed_at
    stack.commits_of(victim, before, 2)
    figure(
        f"kill -9, delay 0: partitions moved after {moved_s:.1f} s, "
        f"the victim committed twice more after {time.monotonic() - killed_at:.1f} s"
    )
    stack.restart(second)

    # (b) SIGTERM during a commit with a 300 s delay: handed over at once.
    set_delay(zk, 300_000)
    third = leader_of(zk, victim_raw)
    stack.committing(victim)
    before = done(victim)
    stopped_at = time.monotonic()
    stack.proc(third).send_signal(signal.SIGTERM)
    stack.moved(victim_raw, third, timeout=60)
    figure(
        f"SIGTERM with a 300 s delay: partitions moved after {time.monotonic() - stopped_at:.1f} s"
    )
    assert stack.proc(third).wait(timeout=60) == 0
    assert "handed over" in cluster.log(cluster.controller_name(stack.index[third]))
    stack.commits_of(victim, before, 2)
    set_delay(zk, 0)
    stack.restart(third)

    # (c) SIGSTOP past the session timeout (delay 0), then SIGCONT.
    fourth = leader_of(zk, victim_raw)
    before = done(victim)
    stack.proc(fourth).send_signal(signal.SIGSTOP)
    fifth = stack.moved(victim_raw, fourth, timeout=60)
    stack.commits_of(victim, before, 2)
    # Keep it out of the assignment while it wakes up, so that it has nothing to lead.
    _set_enabled(zk, fourth, False)
    stack.proc(fourth).send_signal(signal.SIGCONT)
    name = cluster.controller_name(stack.index[fourth])
    wait_until(
        lambda: "dropping all leadership" in cluster.log(name),
        timeout=60,
        what="the stopped controller drops its leadership",
    )
    assert _probe(stack, fourth, victim) == "NOT_LEADER"
    assert leader_of(zk, victim_raw) == fifth
    _set_enabled(zk, fourth, True)
    wait_until(lambda: balanced(zk, set(stack.index)), timeout=90, what="8/8/8 after SIGCONT")

    _dies_after_step1(stack, {victim_raw: victim, bystander_raw: bystander})

    # The end: stop producing, every row committed once, no segment committed twice.
    for producer in stack.producers:
        producer.terminate()
        producer.wait(timeout=30)
    for raw, table in ((victim_raw, victim), (bystander_raw, bystander)):
        wait_until(
            lambda raw=raw, table=table: committed_to_end(stack.topics[raw], table),
            timeout=180,
            interval=0.5,
            what=f"{table} committed to the stream's end",
        )
        report = verify_rows(table)
        assert "PROBLEM" not in report, report
    commits = Counter(
        segment
        for i in range(CONTROLLERS)
        for segment in COMMITTED.findall(cluster.log(cluster.controller_name(i)))
    )
    healed = _finished_by_takeover(victim) | _finished_by_takeover(bystander)
    twice = {s: n for s, n in commits.items() if n > 1}
    assert not twice, twice
    assert done(victim) | done(bystander) <= set(commits) | healed


def _dies_after_step1(stack: Stack, tables: dict[str, str]) -> None:
    """(e): the first lead controller to commit exits after commit step 1; each table it led
    commits twice more, and the one whose commit tripped the fault (the file trips once; the
    controller may have led both tables) has its half-done segment finished by the new lead
    controller's takeover run."""
    leaders = {table: leader_of(stack.zk, raw) for raw, table in tables.items()}
    before = {table: done(table) for table in tables.values()}
    (stack.faults / "controller.commit.after_step1").touch()
    armed_at = time.monotonic()
    dead = wait_until(
        lambda: next((c for c in stack.index if stack.proc(c).poll() is not None), None),
        timeout=60,
        what="a lead controller exits after commit step 1",
    )
    assert stack.proc(dead).returncode == 86  # fault injection's exit status
    hurt = [t for t, leader in leaders.items() if leader == dead]
    assert hurt, (dead, leaders)
    new = {table: stack.commits_of(table, before[table], 2, timeout=120) for table in hurt}
    # The fault trips once: one commit of one table it led was left half-done.
    wait_until(
        lambda: any(new[t] & _finished_by_takeover(t, "commitStoppedAfterStep1") for t in hurt),
        timeout=30,
        what=f"the takeover run of one of {hurt} recorded",
    )
    figure(
        f"lead controller exited after commit step 1: {', '.join(hurt)} committed twice more "
        f"{time.monotonic() - armed_at:.1f} s after the fault was armed "
        "(the guard alone: 300 s)"
    )
    stack.restart(dead)


def _finished_by_takeover(table: str, kind: str | None = None) -> set[str]:
    """Segments named by the actions (of `kind`, or any) of "leader" healing runs of `table`:
    a commit its lead controller left half-done, finished by the next one's takeover run."""
    pattern = re.compile(rf"{re.escape(table.removesuffix('_REALTIME'))}__\d+__\d+__\w+")
    return {
        name
        for run in HealingRun.objects.filter(table=table, trigger="leader")
        for action in run.actions
        if kind in (None, action["kind"])
        for name in pattern.findall(f"{action['segment']} {action['detail']}")
    }


def _set_enabled(zk, instance: str, enabled: bool) -> None:
    def put(record):
        record.simple_fields["HELIX_ENABLED"] = "true" if enabled else "false"
        return record

    update_record(zk, PATHS.participant_config(instance), put)


def _probe(stack: Stack, controller: str, table: str) -> str:
    """A real replica's segmentConsumed for the victim's consuming segment, sent to `controller`."""
    manager = ResourceManager(context.current())
    ideal = manager.idealstate(table)
    segment, replicas = next((s, r) for s, r in ideal.items() if "CONSUMING" in r.values())
    instance = next(iter(replicas))
    port = controller.rsplit("_", 1)[1]
    query = f"instance={instance}&name={segment}&streamPartitionMsgOffset=0&reason=rowLimit"
    request = urllib.request.Request(
        f"http://{HOST}:{port}/segmentConsumed?{query}",
        headers={"Authorization": f"Bearer {cluster_token()}"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())["status"]


def _shows_leaderless(client, user, partition: int, table: str) -> None:
    """The mirror, the leader page and /metrics show the partition without a MASTER."""
    from tables.mirror import sync

    sync.sync_cluster(context.current())
    client.force_login(user)
    page = client.get("/ui/leaders/").content.decode()
    assert f'data-lead-partition="{partition}"' in page and table in page
    assert "no MASTER" in page, page
    metrics = client.get("/metrics").content.decode()
    assert re.search(
        r"^pinot_console_lead_controller_partitions_without_master [1-9]", metrics, re.M
    ), metrics
    assert re.search(
        rf'^pinot_console_lead_controller_leaderless_seconds\{{partition="{partition}"\}} ',
        metrics,
        re.M,
    ), metrics
