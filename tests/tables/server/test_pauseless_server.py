"""The server's side of pauseless consumption (issue 17; round 2 §B.2, §B.4).

Without a controller (a real in-process `ServerInstance`, real ZooKeeper and Redis; the test
writes what the controller would: the segment COMMITTING, the next segment IN_PROGRESS, one
IdealState write):
- a replica going ONLINE for a COMMITTING segment waits for its download URL, then fetches the
  copy once the segment is DONE; meanwhile the partition's next segment consumes, and the waits of
  more segments than the transition pool has threads block no other transition;
- past the table's `realtime.segment.pauseless.download.timeoutSeconds` the replica goes to ERROR
  with Pinot's "Failed to download segment: ... after: ...ms of retrying";
- which stream config key sets that timeout.

With a real controller, two servers, the Celery workers and Spark as processes: a pauseless
segment's committer is held by fault injection between commit start and commit end; meanwhile
the next segment consumes on both servers, the held replicas stay CONSUMING, the lease is renewed
with extendBuildTime (COMMITTER_UPLOADING), and once released the segment turns DONE and both
replicas go ONLINE; every row is committed once (`verify_ledger --rows`).
"""

from __future__ import annotations

import glob
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata, new_in_progress
from tables.domain.segment_states import SegmentState
from tables.domain.znrecord import ZNRecord
from tables.redisconn import get_redis
from tables.segments.segment_format import (
    CREATION_META,
    METADATA_FILE,
    pack_creation_meta,
    pack_segment,
)
from tables.server.consumer import Phase, SegmentConsumer
from tables.server.instance import TRANSITION_THREADS, Replica, ServerInstance
from tables.server.local_segments import (
    DEFAULT_PAUSELESS_DOWNLOAD_TIMEOUT_S,
    PAUSELESS_DOWNLOAD_TIMEOUT_KEY,
    SEGMENT_DOWNLOAD_TIMEOUT_KEY,
    download_timeout_s,
)
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tables.zk.records import create_record, read_record, update_record
from tests.cluster_fixtures import PATHS, github_rows, load
from tests.ingest_cluster import (
    HOST,
    IngestCluster,
    admin_get,
    all_committed,
    free_port,
    table_config,
    verify_rows,
)
from tests.poll import wait_until

TABLE = "githubEvents_REALTIME"
CRC = 1_234_567
CREATED_MS = 1_714_559_400_000


def _name(partition: int, sequence: int, created_ms: int = CREATED_MS) -> str:
    return str(LLCSegmentName.create("githubEvents", partition, sequence, created_ms))


# --- the timeout's configuration ---
def test_the_download_timeout_comes_from_the_stream_config():
    assert download_timeout_s({PAUSELESS_DOWNLOAD_TIMEOUT_KEY: "45"}) == 45
    both = {PAUSELESS_DOWNLOAD_TIMEOUT_KEY: "45", SEGMENT_DOWNLOAD_TIMEOUT_KEY: "3"}
    assert download_timeout_s(both) == 45
    assert download_timeout_s({SEGMENT_DOWNLOAD_TIMEOUT_KEY: "3"}) == 180
    assert download_timeout_s({}) == DEFAULT_PAUSELESS_DOWNLOAD_TIMEOUT_S == 600
    unusable = {PAUSELESS_DOWNLOAD_TIMEOUT_KEY: "soon", SEGMENT_DOWNLOAD_TIMEOUT_KEY: "0"}
    assert download_timeout_s(unusable) == 600


# --- a real server, no controller ---
def _no_build(*args: object) -> None:
    raise AssertionError("nothing is built without a controller")


@dataclass
class Serving:
    instance: ServerInstance
    topic: str
    segments: dict[int, str] = field(default_factory=dict)  # partition -> consuming segment

    def replica(self, segment: str) -> Replica | None:
        return (self.instance.replicas_of(TABLE) or {}).get(segment)

    def consumer(self, segment: str) -> SegmentConsumer | None:
        replica = self.replica(segment)
        return None if replica is None else replica.consumer


@pytest.fixture
def serving(cluster, topic, tmp_path: Path, request) -> Iterator[Serving]:
    """githubEvents (replication 1) on one in-process server, every partition consuming and
    caught up; the download timeout (seconds, a string) is the fixture's indirect parameter."""
    timeout = request.param
    port = free_port()
    instance = ServerInstance(
        f"Server_{HOST}_{port}",
        HOST,
        port,
        context.current,
        builds.deep_store,
        _no_build,
        tmp_path / "server",
        hold_s=0.2,
        tick_s=0.5,
    )
    instance.start()
    try:
        wait_until(
            lambda: cluster.exists(PATHS.liveinstance(instance.instance_id)), what="registered"
        )
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        stream = {
            "realtime.segment.flush.threshold.segment.rows": "1000",
            PAUSELESS_DOWNLOAD_TIMEOUT_KEY: timeout,
        }
        config = table_config(topic, **stream)
        config["segmentsConfig"]["replication"] = "1"
        manager.add_table(config)
        state = Serving(instance, topic)
        for segment in manager.idealstate(TABLE):
            name = LLCSegmentName.parse(segment)
            assert name is not None
            state.segments[name.partition_group_id] = segment

        def all_read() -> bool:
            # The `topic` fixture wrote partition p's rows at offsets 1..p+1.
            consumers = [state.consumer(state.segments[p]) for p in range(4)]
            return all(
                c is not None and c.phase is Phase.CONSUMING and c.next_offset == p + 2
                for p, c in enumerate(consumers)
            )

        wait_until(all_read, what="the 4 partitions consuming, caught up")
        yield state
    finally:
        instance.stop()


def _metadata(zk, segment: str) -> SegmentZKMetadata:
    found = read_record(zk, PATHS.segment(TABLE, segment))
    assert found is not None
    return SegmentZKMetadata.from_znrecord(found.record)


def _set_metadata(zk, meta: SegmentZKMetadata) -> None:
    path = PATHS.segment(TABLE, meta.segment_name)
    if zk.exists(path):
        update_record(zk, path, lambda _old: meta.to_znrecord())
    else:
        create_record(zk, path, meta.to_znrecord())


def _commit_start(zk, serving: Serving, segment: str, end_offset: int) -> str:
    """What the controller's pauseless commit start writes: the segment COMMITTING with its end
    offset, the next segment IN_PROGRESS, then one IdealState write. Returns the next segment."""
    me = serving.instance.instance_id
    name = LLCSegmentName.parse(segment)
    assert name is not None
    _set_metadata(zk, _metadata(zk, segment).mark_committing(str(end_offset)))
    now_ms = int(time.time() * 1000)  # the next segment's flush window starts now
    following = _name(name.partition_group_id, name.sequence_number + 1, now_ms)
    _set_metadata(zk, new_in_progress(following, str(end_offset), 1, 1000, now_ms))

    def flip(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.map_fields[segment] = {me: "ONLINE"}
        out.map_fields[following] = {me: "CONSUMING"}
        return out

    update_record(zk, PATHS.idealstate(TABLE), flip)
    return following


def _commit_end(zk, segment: str, tar: Path) -> None:
    """The controller's commit end: COMMITTING -> DONE with the copy's CRC and download URL."""
    meta = _metadata(zk, segment)
    assert meta.status is SegmentStatus.COMMITTING
    done = meta.mark_done(
        end_offset=str(meta.end_offset),
        start_time_ms=1,
        end_time_ms=2,
        total_docs=1,
        crc=CRC,
        data_crc=CRC,
        size_in_bytes=tar.stat().st_size,
        download_url=tar.as_uri(),
    )
    _set_metadata(zk, done)


def _segment_tar(tmp_path: Path, segment: str) -> Path:
    """A segment file whose creation.meta carries CRC (all the server verifies of a copy)."""
    folder = tmp_path / "built" / segment
    folder.mkdir(parents=True)
    (folder / METADATA_FILE).write_text(f"segment.name = {segment}\n")
    (folder / CREATION_META).write_bytes(pack_creation_meta(CRC, CREATED_MS))
    tar = tmp_path / f"{segment}.tar.gz"
    pack_segment(folder, tar)
    return tar


def _current_state(zk, serving: Serving, segment: str) -> str | None:
    me, session = serving.instance.instance_id, serving.instance.session or ""
    found = read_record(zk, PATHS.currentstate(me, session, TABLE))
    return None if found is None else found.record.map_fields.get(segment, {}).get("CURRENT_STATE")


def _waiting_for_url(serving: Serving, segment: str) -> bool:
    replica = serving.replica(segment)
    return replica is not None and "download URL" in (replica.waiting or "")


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
@pytest.mark.parametrize("serving", ["300"], indirect=True)
def test_a_committing_segment_is_fetched_once_done_and_the_next_one_consumes_meanwhile(
    serving, zk, tmp_path
):
    me = serving.instance.instance_id
    segment = serving.segments[0]
    committed = serving.consumer(segment)
    assert committed is not None
    # More COMMITTING segments to fetch (OFFLINE -> ONLINE) than the transition pool has threads.
    others = [_name(1 + i % 3, 10 + i) for i in range(TRANSITION_THREADS + 2)]
    for other in others:
        meta = new_in_progress(other, "1", 1, 1000, CREATED_MS)
        _set_metadata(zk, meta.mark_committing("2"))

    def add_others(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.map_fields.update({other: {me: "ONLINE"} for other in others})
        return out

    update_record(zk, PATHS.idealstate(TABLE), add_others)
    wait_until(lambda: all(_waiting_for_url(serving, o) for o in others), what="others waiting")
    following = _commit_start(zk, serving, segment, end_offset=2)

    # The replica waits for the download URL; the next segment consumes meanwhile.
    wait_until(lambda: _waiting_for_url(serving, segment), what="waiting for the download URL")
    nxt = wait_until(lambda: serving.consumer(following), what="the next segment's consumer")
    assert nxt.spec.start_offset == 2 and committed.phase is Phase.STOPPED
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    admin.produce(serving.topic, 0, [b'{"id": "2"}'] * 3, now_ms=0)
    wait_until(lambda: nxt.next_offset == 5 and nxt.rows == 3, what="new rows in the next segment")
    assert _current_state(zk, serving, following) == "CONSUMING"
    # Still waiting: neither the committing segment nor the others moved.
    assert _current_state(zk, serving, segment) == "CONSUMING"
    assert all(_waiting_for_url(serving, s) for s in [segment, *others])
    assert all(serving.replica(o).state is None for o in others)

    tar = _segment_tar(tmp_path, segment)
    for name in [segment, *others]:
        _commit_end(zk, name, tar)
    for name in [segment, *others]:
        wait_until(lambda n=name: _current_state(zk, serving, n) == "ONLINE", what=f"{name} ONLINE")
        replica = serving.replica(name)
        assert replica is not None
        assert (replica.state, replica.error, replica.waiting) == (SegmentState.ONLINE, None, None)
        assert serving.instance.local.has(TABLE, name, CRC)
    assert serving.consumer(following) is nxt and nxt.phase is Phase.CONSUMING


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
@pytest.mark.parametrize("serving", ["2"], indirect=True)
def test_a_segment_left_committing_past_the_timeout_puts_the_replica_in_error(serving, zk):
    segment = serving.segments[1]
    following = _commit_start(zk, serving, segment, end_offset=3)
    wait_until(lambda: _waiting_for_url(serving, segment), what="waiting for the download URL")
    wait_until(lambda: serving.consumer(following), what="the next segment's consumer")

    wait_until(lambda: _current_state(zk, serving, segment) == "ERROR", what="ERROR published")
    replica = serving.replica(segment)
    assert replica is not None
    assert replica.state is SegmentState.ERROR and replica.waiting is None
    assert replica.error == (
        f"TimeoutError: Failed to download segment: {segment} after: 2000ms of retrying"
    )
    assert not serving.instance.local.has(TABLE, segment, None)
    assert serving.consumer(following).phase is Phase.CONSUMING  # the partition goes on


# --- a real controller, two servers, Celery and Spark ---
SEGMENT_ROWS = 50


class HeldCluster(IngestCluster):
    """The ingestion processes with fault injection on, in `faults`."""

    def __init__(self, zk_hosts: str, data_dir: Path, log_prefix: str, faults: Path) -> None:
        super().__init__(zk_hosts, data_dir, log_prefix)
        self.faults = faults

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "FAULT_INJECTION_DIR": str(self.faults)}


@pytest.fixture
def pair(worker_zk, celery_workers, tmp_path, request) -> Iterator[HeldCluster]:
    """A controller and two servers as processes (logs: <test name>-<process>.log)."""
    (tmp_path / "faults").mkdir()
    name = request.node.name
    cluster = HeldCluster(celery_workers.zk_hosts, tmp_path / "servers", name, tmp_path / "faults")
    for old in cluster.log_dir.glob(f"{glob.escape(name)}-*.log"):
        old.unlink()
    cluster.start_controller()
    for index in range(2):
        cluster.start_server(index)
    wanted = {cluster.controller_id, cluster.server_id(0), cluster.server_id(1)}

    def live() -> bool:
        path = PATHS.liveinstances
        return worker_zk.exists(path) and wanted <= set(worker_zk.get_children(path))

    wait_until(live, timeout=90, what="controller and 2 servers live")
    try:
        yield cluster
    finally:
        cluster.stop()


def _pauseless_config(topic: str) -> dict:
    rest = table_config(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS),
            "realtime.segment.flush.threshold.time": "20s",
            # A short commit lease: the held committer must renew it (extendBuildTime).
            "realtime.segment.commit.timeoutSeconds": "5",
        },
    )
    rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
    rest["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    return rest


def _debug(cluster: IngestCluster, index: int) -> dict[str, dict]:
    items = admin_get(cluster.server_ports[f"server{index}"], f"/debug/tables/{TABLE}")
    return {item["segmentName"]: item for item in items}


def _phase(cluster: IngestCluster, index: int, segment: str) -> str | None:
    return _debug(cluster, index).get(segment, {}).get("phase")


def _processed(cluster: IngestCluster, index: int) -> int:
    metrics = admin_get(cluster.server_ports[f"server{index}"], "/metrics")
    found = re.search(r"^pinot_server_llcControllerResponseProcessed_Count (\S+)$", metrics, re.M)
    return int(float(found.group(1))) if found else 0


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.celery
@pytest.mark.spark
@pytest.mark.django_db(transaction=True)
def test_a_pauseless_commit_builds_while_the_next_segment_consumes(pair, topic, worker_zk):
    for index in range(2):  # whoever commits is held between commit start and commit end
        (pair.faults / f"server.{pair.server_id(index)}.commit_holds").write_text("")
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(_pauseless_config(topic))
    first = next(s for s in manager.idealstate(TABLE) if s.startswith("githubEvents__0__0__"))
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    rows = github_rows()
    admin.produce(topic, 0, rows[:SEGMENT_ROWS], now_ms=int(time.time() * 1000))

    wait_until(
        lambda: manager.segment_metadata(TABLE, first).status is SegmentStatus.COMMITTING,
        timeout=120,
        what="the first segment COMMITTING",
    )
    committer = (
        wait_until(
            lambda: next((i + 1 for i in range(2) if _phase(pair, i, first) == "COMMITTING"), None),
            timeout=60,
            what="the committer of the first segment",
        )
        - 1
    )
    end = int(manager.segment_metadata(TABLE, first).end_offset or 0)
    # Commit start's IdealState write (its step 3) may land a moment after the metadata's.
    following = wait_until(
        lambda: next(
            (s for s in manager.idealstate(TABLE) if s.startswith("githubEvents__0__1__")), None
        ),
        timeout=30,
        what="the next segment in the IdealState",
    )
    assert manager.idealstate(TABLE)[first] == {pair.server_id(i): "ONLINE" for i in range(2)}

    # While the commit is held: the next segment consumes on both servers from the end offset,
    # and rows produced now reach it; the committing segment's replicas are still CONSUMING.
    admin.produce(topic, 0, rows[SEGMENT_ROWS : SEGMENT_ROWS + 7], now_ms=int(time.time() * 1000))
    latest = RedisStreamProvider(get_redis(settings.REDIS_URL), topic).latest_offset(0)

    def next_segment_caught_up() -> bool:
        for index in range(2):
            item = _debug(pair, index).get(following, {})
            if item.get("phase") != "CONSUMING" or item.get("nextOffset") != str(latest):
                return False
            assert item["startOffset"] == str(end)
        return True

    wait_until(next_segment_caught_up, timeout=60, what="the next segment consuming new rows")
    for index in range(2):
        assert _debug(pair, index)[first]["currentState"] == "CONSUMING"
    # The held committer renews its lease, and the controller accepts it (COMMITTER_UPLOADING).
    wait_until(lambda: _processed(pair, committer) >= 2, timeout=60, what="two lease renewals")
    assert manager.segment_metadata(TABLE, first).status is SegmentStatus.COMMITTING

    for held in pair.faults.iterdir():
        held.unlink()
    wait_until(
        lambda: all_committed(topic, TABLE), timeout=600, interval=1, what="all rows committed"
    )
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
    assert manager.segment_metadata(TABLE, first).download_url

    def both_online() -> bool:
        return all(_debug(pair, i)[first]["currentState"] == "ONLINE" for i in range(2))

    wait_until(both_online, timeout=120, what="both replicas of the first segment ONLINE")
    codes = pair.stop()
    assert all(code == 0 for code in codes.values()), codes
