"""Helix message znodes (`tables.zk.messages`) and a server's handling of FORCE_COMMIT
(`tables.server.messages`), against the real ZooKeeper and Redis.

- the message znode has Pinot's fields and goes through send / read / mark read / delete;
- a real in-process `ServerInstance` (no controller) handles a FORCE_COMMIT: the listed segments
  stop consuming with reason `forceCommitMessageReceived`, the others go on, the message is gone;
  a message for an older session is discarded unhandled;
- a consumer forced with zero rows still asks to commit, and commits the empty segment;
- a force commit that arrives while a replica is starting its consumer is applied once it started.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.completion_response import Response, Status
from tables.domain.idealstate import with_paused_partitions
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import new_in_progress
from tables.domain.segment_states import FORCE_COMMIT
from tables.domain.znrecord import ZNRecord
from tables.server.consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from tables.server.instance import Replica, ServerInstance
from tables.server.messages import MessageHandler
from tables.streams.base import MessageBatch, StreamProvider
from tables.zk import messages
from tables.zk.records import create_record, update_record
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

TABLE = "githubEvents_REALTIME"
SEGMENTS = ["t__0__0__20240501T1030Z", "t__1__0__20240501T1030Z"]


# --- the znodes ---
def test_a_force_commit_message_has_pinots_fields():
    record = messages.force_commit_message(
        "t_REALTIME",
        reversed(SEGMENTS),
        source="Controller_h_9000",
        cluster="PinotCluster",
        target="Server_h_1",
        target_session="1a2b",
        now_ms=1_700_000_000_000,
        msg_id="m-1",
    )
    assert record.id == "m-1"
    assert record.simple_fields == {
        "MSG_ID": "m-1",
        "MSG_TYPE": "USER_DEFINE_MSG",
        "MSG_SUBTYPE": "FORCE_COMMIT",
        "MSG_STATE": "new",
        "CREATE_TIMESTAMP": "1700000000000",
        "SRC_NAME": "Controller_h_9000",
        "SRC_INSTANCE_TYPE": "PARTICIPANT",
        "SRC_CLUSTER": "PinotCluster",
        "TGT_NAME": "Server_h_1",
        "TGT_SESSION_ID": "1a2b",
        "RESOURCE_NAME": "t_REALTIME",
        "TIMEOUT": "-1",
        "RETRY_COUNT": "0",
        "tableName": "t_REALTIME",
        "segmentNames": ",".join(SEGMENTS),
    }
    parsed = messages.parse_force_commit(record)
    assert parsed == messages.ForceCommitRequest("t_REALTIME", tuple(SEGMENTS))
    other = ZNRecord(id="x", simple_fields={"MSG_TYPE": "STATE_TRANSITION"})
    assert messages.parse_force_commit(other) is None


@pytest.mark.zk
def test_send_read_mark_and_delete_a_message(servers, zk):
    target = SERVERS[0]
    seen: list[list[str]] = []
    messages.watch_messages(zk, PATHS, target, lambda ids: seen.append(ids))
    record = messages.force_commit_message(
        "t_REALTIME",
        SEGMENTS,
        source="c",
        cluster=PATHS.cluster,
        target=target,
        target_session="s",
        now_ms=1,
    )
    path = messages.send_message(zk, PATHS, record)
    assert path == f"/PinotCluster/INSTANCES/{target}/MESSAGES/{record.id}"
    assert messages.message_ids(zk, PATHS, target) == [record.id]
    assert messages.message_ids(zk, PATHS, SERVERS[1]) == []
    wait_until(lambda: [record.id] in seen, what="the watch reporting the message")
    assert messages.read_message(zk, PATHS, target, record.id) == record

    assert messages.mark_read(zk, PATHS, target, record.id, "s", 5)
    read = messages.read_message(zk, PATHS, target, record.id)
    assert read is not None
    assert read.simple_fields["MSG_STATE"] == "read"
    assert read.simple_fields["READ_TIMESTAMP"] == "5"
    assert read.simple_fields["EXE_SESSION_ID"] == "s"

    assert messages.delete_message(zk, PATHS, target, record.id)
    assert not messages.delete_message(zk, PATHS, target, record.id)
    assert not messages.mark_read(zk, PATHS, target, record.id, "s", 6)
    assert messages.read_message(zk, PATHS, target, record.id) is None
    wait_until(lambda: seen[-1] == [], what="the watch reporting the deletion")


# --- a real server ---
def _no_build(*args: object) -> None:
    raise AssertionError("nothing completes without a controller")


@dataclass
class Serving:
    instance: ServerInstance
    segments: dict[int, str] = field(default_factory=dict)  # partition -> consuming segment


@pytest.fixture
def serving(cluster, topic, tmp_path: Path) -> Iterator[Serving]:
    """The githubEvents table (replication 1) on one in-process server, every partition
    consuming; there is no controller, so a segment that stops consuming holds forever."""
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
        config = table_config(topic, **{"realtime.segment.flush.threshold.segment.rows": "1000"})
        config["segmentsConfig"]["replication"] = "1"
        manager.add_table(config)
        state = Serving(instance)
        for segment in manager.idealstate(TABLE):
            name = LLCSegmentName.parse(segment)
            assert name is not None
            state.segments[name.partition_group_id] = segment

        def all_consuming() -> bool:
            replicas = instance.replicas_of(TABLE) or {}
            consumers = [replicas[s].consumer for s in state.segments.values() if s in replicas]
            return len(consumers) == 4 and all(
                c is not None and c.phase is Phase.CONSUMING for c in consumers
            )

        wait_until(all_consuming, what="the 4 partitions consuming")
        yield state
    finally:
        instance.stop()


def _consumer(serving: Serving, partition: int) -> SegmentConsumer:
    replicas = serving.instance.replicas_of(TABLE) or {}
    consumer = replicas[serving.segments[partition]].consumer
    assert consumer is not None
    return consumer


def _send(zk, serving: Serving, segments: list[str], session: str) -> str:
    record = messages.force_commit_message(
        TABLE,
        segments,
        source="Controller_test",
        cluster=PATHS.cluster,
        target=serving.instance.instance_id,
        target_session=session,
        now_ms=1,
    )
    messages.send_message(zk, PATHS, record)
    return record.id


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_server_force_commits_the_listed_segments(serving, zk):
    me = serving.instance.instance_id
    # A message for an earlier session of this server is dropped without effect.
    stale = _send(zk, serving, [serving.segments[2]], session="deadbeef")
    wait_until(
        lambda: stale not in messages.message_ids(zk, PATHS, me), what="stale message deleted"
    )
    assert _consumer(serving, 2).phase is Phase.CONSUMING
    assert serving.instance.messages.handled == 0

    wanted = [serving.segments[0], serving.segments[1], "githubEvents__9__0__20240501T1030Z"]
    current = _send(zk, serving, wanted, session=serving.instance.session or "")
    wait_until(lambda: current not in messages.message_ids(zk, PATHS, me), what="message handled")
    for partition in (0, 1):
        consumer = _consumer(serving, partition)
        wait_until(
            lambda c=consumer: c.phase is Phase.HOLDING, what=f"partition {partition} holding"
        )
        assert consumer.end_reason == FORCE_COMMIT
    for partition in (2, 3):
        assert _consumer(serving, partition).phase is Phase.CONSUMING
    assert serving.instance.messages.handled == 1


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_segment_that_starts_while_its_partition_is_paused_is_committed_at_once(serving, zk):
    """The pause's FORCE_COMMIT can miss a segment whose consumer did not exist yet: the server
    sees the pause in the IdealState when it starts the consumer and forces it itself."""
    old = serving.segments[2]
    name = LLCSegmentName.parse(old)
    assert name is not None
    fresh = str(name.next(1_714_561_333_417))
    create_record(
        zk, PATHS.segment(TABLE, fresh), new_in_progress(fresh, "1", 1, 1000, 1).to_znrecord()
    )
    me = serving.instance.instance_id

    def paused_with_a_new_segment(record: ZNRecord) -> ZNRecord:
        out = with_paused_partitions(record, {2})
        out.map_fields[old] = {me: "OFFLINE"}
        out.map_fields[fresh] = {me: "CONSUMING"}
        return out

    update_record(zk, PATHS.idealstate(TABLE), paused_with_a_new_segment)

    def forced() -> SegmentConsumer | None:
        replica = (serving.instance.replicas_of(TABLE) or {}).get(fresh)
        consumer = None if replica is None else replica.consumer
        return consumer if consumer is not None and consumer.phase is Phase.HOLDING else None

    consumer = wait_until(forced, what="the new segment's consumer forced to commit")
    assert consumer.end_reason == FORCE_COMMIT
    assert _consumer(serving, 3).phase is Phase.CONSUMING  # not paused: untouched


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_force_commit_right_after_an_idealstate_change_is_not_lost(serving, zk):
    """A pause writes the IdealState, then sends FORCE_COMMIT at once: the server's watch has
    cleared its cached tenant check and the reconcile thread has not re-read it yet. The
    message must still find the consumers (it once found "none" and the pause never ended)."""
    with serving.instance._lock:  # the state right after the IdealState watch fired
        serving.instance._serves.pop(TABLE, None)
    forced = serving.instance.messages.force_commit(TABLE, [serving.segments[1]])
    assert forced == [serving.segments[1]]
    consumer = _consumer(serving, 1)
    wait_until(lambda: consumer.phase is Phase.HOLDING, what="partition 1 holding")
    assert consumer.end_reason == FORCE_COMMIT


# --- a consumer with no rows ---
class EmptyStream(StreamProvider):
    def partition_count(self) -> int:
        return 1

    def earliest_offset(self, partition: int) -> int:
        return 7

    def latest_offset(self, partition: int) -> int:
        return 7

    def fetch(self, partition: int, start: int, most: int, timeout_ms: int) -> MessageBatch:
        threading.Event().wait(timeout_ms / 1000)  # a real stream blocks for the timeout too
        return MessageBatch([], start, start, False)


class CommitClient:
    """Answers COMMIT to the first segmentConsumed; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str | None, int, int]] = []

    def segment_consumed(self, table, segment, offset, reason, row_count, start=False) -> Response:
        self.asked.append((reason, offset, row_count))
        return Response(Status.COMMIT, offset=str(offset), build_time_sec=60)

    def segment_stopped_consuming(self, *args: object) -> Response:
        raise AssertionError("the consumer must not fail")


def force_commit_empty(spec: ConsumingSegment, client: object, commit) -> SegmentConsumer:
    """A consumer of `spec` over an empty stream, forced to commit; returned once COMMITTED and
    stopped."""
    consumer = SegmentConsumer(
        spec,
        EmptyStream("topic"),
        client,  # type: ignore[arg-type]
        commit,
        PartitionStats(spec.table, spec.topic, spec.partition),
        clock=lambda: 1.0,  # far inside the one-hour window: only the force commit ends it
        fetch_timeout_ms=20,
    )
    consumer.start()
    try:
        wait_until(lambda: consumer.stats.current_offset == 7, what="the consumer running")
        consumer.force_commit()
        wait_until(lambda: consumer.phase is Phase.COMMITTED, what="the empty segment committed")
    finally:
        consumer.stop()
        consumer.join(5)
    return consumer


def test_a_forced_consumer_with_no_rows_commits_the_empty_segment():
    spec = ConsumingSegment(
        "t_REALTIME", "t__0__3__20240501T1030Z", "topic", 0, 7, 1000, 3_600_000, 0
    )
    committed: list[tuple[int, int]] = []

    def commit(consumer: SegmentConsumer, response: Response) -> bool:
        committed.append((consumer.rows, consumer.next_offset))
        return True

    client = CommitClient()
    consumer = force_commit_empty(spec, client, commit)
    assert client.asked == [(FORCE_COMMIT, 7, 0)]
    assert committed == [(0, 7)]
    assert consumer.end_reason == FORCE_COMMIT


# --- a force commit while the consumer starts ---
class FakeServer:
    instance_id = "Server_fake_1"
    session = "s"

    def __init__(self, replicas: dict[str, Replica]) -> None:
        self.replicas = replicas

    def replicas_of(self, table: str) -> dict[str, Replica] | None:
        return dict(self.replicas) if table == "t_REALTIME" else None


class FakeProvider:
    def __init__(self) -> None:
        self.woken: list[list[int]] = []

    def wake_many(self, partitions: list[int]) -> None:
        self.woken.append(sorted(partitions))


class FakeConsumer:
    def __init__(
        self, phase: Phase = Phase.CONSUMING, partition: int = 0, provider: object = None
    ) -> None:
        self.phase = phase
        self.forced = False
        self.woke_itself = False
        self.spec = SimpleNamespace(partition=partition)
        self.provider = provider if provider is not None else FakeProvider()

    def force_commit(self, wake: bool = True) -> None:
        self.forced = True
        self.woke_itself = wake


def test_a_force_commit_waits_for_a_starting_consumer():
    starting = Replica(busy=True)
    holding = Replica(consumer=FakeConsumer(Phase.HOLDING))  # type: ignore[arg-type]
    consuming = Replica(consumer=FakeConsumer())  # type: ignore[arg-type]
    server = FakeServer({"a": starting, "b": holding, "c": consuming, "d": Replica()})
    handler = MessageHandler(server)  # type: ignore[arg-type]

    assert handler.force_commit("other_REALTIME", ["a", "b", "c"]) == []
    assert handler.force_commit("t_REALTIME", ["a", "b", "c", "d", "e"]) == ["c"]
    assert consuming.consumer.forced and not holding.consumer.forced  # type: ignore[union-attr]

    late = FakeConsumer()
    assert handler.consumer_started("t_REALTIME", "a", late)  # type: ignore[arg-type]
    assert late.forced
    again = FakeConsumer()
    assert not handler.consumer_started("t_REALTIME", "a", again)  # type: ignore[arg-type]
    assert not handler.consumer_started("t_REALTIME", "d", again)  # type: ignore[arg-type]
    assert not again.forced


def test_a_force_commit_wakes_the_fetches_of_one_provider_together():
    """Every flag is set first, then each provider wakes its partitions in one call."""
    shared, other = FakeProvider(), FakeProvider()
    consumers = {
        "a": FakeConsumer(partition=0, provider=shared),
        "b": FakeConsumer(partition=3, provider=shared),
        "c": FakeConsumer(partition=5, provider=other),
        "d": FakeConsumer(Phase.HOLDING, partition=7, provider=shared),
    }
    server = FakeServer({s: Replica(consumer=c) for s, c in consumers.items()})  # type: ignore[arg-type]
    handler = MessageHandler(server)  # type: ignore[arg-type]
    assert handler.force_commit("t_REALTIME", ["a", "b", "c", "d"]) == ["a", "b", "c"]
    assert (shared.woken, other.woken) == ([[0, 3]], [[5]])
    assert not any(c.woke_itself for c in consumers.values())
