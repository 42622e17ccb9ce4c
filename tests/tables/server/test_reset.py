"""Helix resets (STATE_TRANSITION to OFFLINE, round 2 §A.7) against the real ZooKeeper and Redis.

- the message znode has Helix's fields; `pending_state_transition` finds one waiting for the same
  session, resource and partition only;
- a real in-process `ServerInstance` (no controller: segments never complete) whose consumer was
  made to fail by fault injection holds the replica in ERROR, says why in CURRENTSTATES' replica
  error and in its live state (`stoppedReason`); a reset for the current session brings it back to
  its IdealState state, CONSUMING, reading again from the segment's ZK start offset;
- after the controller's segmentStoppedConsuming (IdealState replica OFFLINE) a reset leaves the
  replica OFFLINE, and its live state still says why the consumer stopped;
- a reset for another session, from a state the replica is not in, or of a replica the server does
  not host is deleted without effect; a reset of a healthy CONSUMING replica restarts its consumer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_states import SegmentState
from tables.server.consumer import Phase, SegmentConsumer
from tables.server.instance import Replica, ServerInstance
from tables.server.live import LivePublisher
from tables.server.messages import MessageHandler
from tables.zk import messages
from tables.zk.records import read_record, update_record
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

TABLE = "githubEvents_REALTIME"
SEGMENT = "githubEvents__0__0__20240501T1030Z"


# --- the znodes ---
def test_a_reset_message_has_helix_fields():
    record = messages.state_transition_message(
        TABLE,
        SEGMENT,
        target="Server_h_1",
        target_session="1a2b",
        from_state="ERROR",
        source="controller-host-ADMIN",
        cluster="PinotCluster",
        now_ms=1_700_000_000_000,
        msg_id="m-1",
    )
    assert record.id == "m-1"
    assert record.simple_fields == {
        "MSG_ID": "m-1",
        "MSG_TYPE": "STATE_TRANSITION",
        "MSG_STATE": "new",
        "CREATE_TIMESTAMP": "1700000000000",
        "SRC_NAME": "controller-host-ADMIN",
        "SRC_INSTANCE_TYPE": "PARTICIPANT",
        "SRC_CLUSTER": "PinotCluster",
        "TGT_NAME": "Server_h_1",
        "TGT_SESSION_ID": "1a2b",
        "RESOURCE_NAME": TABLE,
        "PARTITION_NAME": SEGMENT,
        "FROM_STATE": "ERROR",
        "TO_STATE": "OFFLINE",
        "STATE_MODEL_DEF": "SegmentOnlineOfflineStateModel",
        "STATE_MODEL_FACTORY_NAME": "DEFAULT",
        "TIMEOUT": "-1",
        "RETRY_COUNT": "0",
    }
    assert messages.parse_state_transition(record) == messages.StateTransitionRequest(
        TABLE, SEGMENT, "ERROR", "OFFLINE", "1a2b"
    )
    force = messages.force_commit_message(
        TABLE, [SEGMENT], source="c", cluster="c", target="t", target_session="s", now_ms=1
    )
    assert messages.parse_state_transition(force) is None
    incomplete = record.copy()
    del incomplete.simple_fields["PARTITION_NAME"]
    assert messages.parse_state_transition(incomplete) is None


def _reset(target: str, session: str, *, segment: str = SEGMENT, table: str = TABLE, **kw):
    return messages.state_transition_message(
        table,
        segment,
        target=target,
        target_session=session,
        from_state=kw.pop("from_state", "ERROR"),
        source="controller-host-ADMIN",
        cluster=PATHS.cluster,
        now_ms=1,
        **kw,
    )


@pytest.mark.zk
def test_a_pending_reset_is_found_for_its_session_resource_and_partition_only(servers, zk):
    target = SERVERS[0]

    def pending(session: str = "s1", table: str = TABLE, segment: str = SEGMENT) -> bool:
        return messages.pending_state_transition(zk, PATHS, target, session, table, segment)

    assert not pending()
    other_kind = messages.force_commit_message(
        TABLE, [SEGMENT], source="c", cluster="c", target=target, target_session="s1", now_ms=1
    )
    messages.send_message(zk, PATHS, other_kind)
    assert not pending()
    record = _reset(target, "s1")
    messages.send_message(zk, PATHS, record)
    assert pending()
    messages.mark_read(zk, PATHS, target, record.id, "s1", 2)
    assert pending()  # read but not yet handled: still pending
    assert not pending(session="s2")
    assert not pending(table="other_REALTIME")
    assert not pending(segment="githubEvents__1__0__20240501T1030Z")
    assert not messages.pending_state_transition(zk, PATHS, SERVERS[1], "s1", TABLE, SEGMENT)
    messages.delete_message(zk, PATHS, target, record.id)
    assert not pending()


# --- the handler's decision, on a stand-in server ---
class ResettableServer:
    instance_id = "Server_fake_1"
    session = "s"

    def __init__(self, replicas: dict[str, Replica]) -> None:
        self.replicas = replicas
        self.reset: list[str] = []

    def replicas_of(self, table: str) -> dict[str, Replica] | None:
        return dict(self.replicas) if table == TABLE else None

    def reset_replica(self, table: str, segment: str) -> bool:
        if table != TABLE or segment not in self.replicas:
            return False
        self.reset.append(segment)
        return True


class PhaseOnly:
    def __init__(self, phase: Phase) -> None:
        self.phase = phase


def test_the_from_state_must_be_the_replicas_state_and_a_failed_consumer_is_error():
    failed = Replica(SegmentState.CONSUMING, consumer=PhaseOnly(Phase.ERROR))  # type: ignore[arg-type]
    healthy = Replica(SegmentState.CONSUMING, consumer=PhaseOnly(Phase.CONSUMING))  # type: ignore[arg-type]
    server = ResettableServer(
        {"failed": failed, "healthy": healthy, "online": Replica(SegmentState.ONLINE)}
    )
    handler = MessageHandler(server)  # type: ignore[arg-type]

    def reset(segment: str, from_state: str, to_state: str = "OFFLINE") -> int:
        request = messages.StateTransitionRequest(TABLE, segment, from_state, to_state, "s")
        return handler.state_transition("m", request)

    # The controller resets right after segmentStoppedConsuming, before the server's reconcile
    # round has recorded ERROR: the failed consumer's replica is ERROR already.
    assert reset("failed", "ERROR") == 1
    assert reset("healthy", "ERROR") == 0  # stale: it is CONSUMING
    assert reset("online", "CONSUMING") == 0
    assert reset("online", "ONLINE", to_state="CONSUMING") == 0  # not a reset
    assert reset("absent", "ERROR") == 0  # not hosted
    assert server.reset == ["failed"]
    assert reset("healthy", "CONSUMING") == reset("online", "*") == 1
    assert server.reset == ["failed", "healthy", "online"]


# --- a real server ---
def _no_build(*args: object) -> None:
    raise AssertionError("nothing completes without a controller")


@dataclass
class Serving:
    instance: ServerInstance
    faults: Path
    segments: dict[int, str] = field(default_factory=dict)  # partition -> consuming segment
    start_offsets: dict[str, int] = field(default_factory=dict)

    def replica(self, segment: str) -> Replica:
        return (self.instance.replicas_of(TABLE) or {})[segment]

    def consumer(self, segment: str) -> SegmentConsumer | None:
        replica = (self.instance.replicas_of(TABLE) or {}).get(segment)
        return None if replica is None else replica.consumer


@pytest.fixture
def serving(cluster, topic, tmp_path: Path, settings) -> Iterator[Serving]:
    """The githubEvents table (replication 1) on one in-process server, every partition
    consuming; fault injection on, in a directory of the test's own."""
    settings.FAULT_INJECTION_DIR = str(tmp_path / "faults")
    (tmp_path / "faults").mkdir()
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
        state = Serving(instance, tmp_path / "faults")
        for segment in manager.idealstate(TABLE):
            name = LLCSegmentName.parse(segment)
            assert name is not None
            state.segments[name.partition_group_id] = segment
            meta = manager.segment_metadata(TABLE, segment)
            state.start_offsets[segment] = int(meta.start_offset or 0)

        def all_read() -> bool:
            # The `topic` fixture wrote partition p's rows at offsets 1..p+1.
            consumers = [state.consumer(s) for s in state.segments.values()]
            return all(
                c is not None and c.phase is Phase.CONSUMING and c.next_offset == p + 2
                for p, c in enumerate(consumers)
            )

        wait_until(all_read, what="the 4 partitions consuming, caught up")
        yield state
    finally:
        instance.stop()


def _current_state(zk, serving: Serving, segment: str) -> str | None:
    me, session = serving.instance.instance_id, serving.instance.session or ""
    found = read_record(zk, PATHS.currentstate(me, session, TABLE))
    return None if found is None else found.record.map_fields.get(segment, {}).get("CURRENT_STATE")


def _fail_one_consumer(zk, serving: Serving) -> tuple[str, SegmentConsumer]:
    """Arm this server's consumer_fails point; the first consumer to fetch fails. Returns its
    segment and consumer once the replica is ERROR in CURRENTSTATES."""
    me = serving.instance.instance_id
    (serving.faults / f"server.{me}.consumer_fails").write_text("")

    def failed() -> str | None:
        replicas = serving.instance.replicas_of(TABLE) or {}
        for segment in serving.segments.values():
            if segment in replicas and replicas[segment].state is SegmentState.ERROR:
                return segment
        return None

    segment = wait_until(failed, what="a replica in ERROR")
    wait_until(lambda: _current_state(zk, serving, segment) == "ERROR", what="ERROR published")
    failed_consumer = serving.replica(segment).failed_consumer
    assert failed_consumer is not None
    return segment, failed_consumer


def _send_and_wait(zk, serving: Serving, record) -> None:
    me = serving.instance.instance_id
    messages.send_message(zk, PATHS, record)
    wait_until(lambda: record.id not in messages.message_ids(zk, PATHS, me), what="message deleted")


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_stopping_server_stops_its_failed_consumers_reports(serving, zk):
    _segment, failed = _fail_one_consumer(zk, serving)
    # No controller here: segmentStoppedConsuming is NOT_SENT and sent again, for ever.
    assert not failed.join(0.2)
    serving.instance.stop()
    assert failed.join(10)


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_replica_in_error_is_reset_and_consumes_again(serving, zk, redis_client):
    me = serving.instance.instance_id
    segment, failed = _fail_one_consumer(zk, serving)
    reason = f"consumerError: InjectedConsumerFailure: fault injection: server.{me}.consumer_fails"
    replica = serving.replica(segment)
    assert (replica.error, failed.stopped_reason, failed.phase) == (reason, reason, Phase.ERROR)
    # The live state still shows the partition, and why it stopped.
    publisher = LivePublisher(serving.instance, redis_client, "reset-test", 60.0, 30.0)
    live = {item.segmentName: item for item in publisher.collect()}
    assert (live[segment].consumerState, live[segment].phase) == ("NOT_CONSUMING", "ERROR")
    assert live[segment].stoppedReason == reason
    assert {live[s].stoppedReason for s in serving.segments.values() if s != segment} == {None}
    # ERROR stays ERROR by itself (no controller changes the IdealState here).
    assert serving.instance.messages.handled == 0

    _send_and_wait(zk, serving, _reset(me, serving.instance.session or "", segment=segment))
    assert serving.instance.messages.handled == 1
    assert failed.join(10)  # its segmentStoppedConsuming reports ended with the reset

    def consuming_again() -> SegmentConsumer | None:
        consumer = serving.consumer(segment)
        ok = consumer is not None and consumer is not failed and consumer.phase is Phase.CONSUMING
        return consumer if ok else None

    consumer = wait_until(consuming_again, what="the replica CONSUMING again")
    partition = consumer.spec.partition
    assert consumer.spec.start_offset == serving.start_offsets[segment]  # from ZooKeeper
    wait_until(lambda: consumer.next_offset == partition + 2, what="its rows read again")
    assert consumer.rows == partition + 1  # all of them, from the start offset
    replica = serving.replica(segment)
    assert (replica.state, replica.error, replica.failed_consumer) == (
        SegmentState.CONSUMING,
        None,
        None,
    )
    wait_until(lambda: _current_state(zk, serving, segment) == "CONSUMING", what="published")
    live = {item.segmentName: item for item in publisher.collect()}
    assert (live[segment].phase, live[segment].stoppedReason) == ("CONSUMING", None)


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_stale_or_foreign_resets_are_deleted_without_effect(serving, zk):
    me = serving.instance.instance_id
    segment, failed = _fail_one_consumer(zk, serving)
    session = serving.instance.session or ""

    _send_and_wait(zk, serving, _reset(me, "deadbeef", segment=segment))  # an older session
    _send_and_wait(zk, serving, _reset(me, session, segment=segment, from_state="CONSUMING"))
    _send_and_wait(zk, serving, _reset(me, session, segment="githubEvents__9__0__20240501T1030Z"))
    _send_and_wait(zk, serving, _reset(me, session, segment=segment, to_state="ONLINE"))
    replica = serving.replica(segment)
    assert (replica.state, replica.failed_consumer) == (SegmentState.ERROR, failed)
    assert _current_state(zk, serving, segment) == "ERROR"
    assert serving.instance.messages.handled == 0

    _send_and_wait(zk, serving, _reset(me, session, segment=segment, from_state="*"))
    assert serving.instance.messages.handled == 1
    wait_until(
        lambda: serving.replica(segment).state is SegmentState.CONSUMING, what="CONSUMING again"
    )


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_consuming_replica_is_reset_too_and_starts_over(serving, zk):
    me = serving.instance.instance_id
    segment = serving.segments[3]
    before = serving.consumer(segment)
    assert before is not None
    record = _reset(me, serving.instance.session or "", segment=segment, from_state="CONSUMING")
    _send_and_wait(zk, serving, record)
    assert before.phase is Phase.STOPPED  # stopped without asking to commit
    after = wait_until(
        lambda: (c := serving.consumer(segment)) is not before and c, what="a new consumer"
    )
    wait_until(lambda: after.next_offset == 5 and after.rows == 4, what="rows read again")
    assert serving.replica(segment).state is SegmentState.CONSUMING
    assert serving.consumer(serving.segments[2]).phase is Phase.CONSUMING  # others untouched


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_after_stopped_consuming_a_reset_replica_stays_offline_and_still_says_why(
    serving, zk, redis_client
):
    me = serving.instance.instance_id
    segment, failed = _fail_one_consumer(zk, serving)

    def offline(record):  # what the controller does on segmentStoppedConsuming
        out = record.copy()
        out.map_fields[segment] = {me: "OFFLINE"}
        return out

    update_record(zk, PATHS.idealstate(TABLE), offline)
    _send_and_wait(zk, serving, _reset(me, serving.instance.session or "", segment=segment))
    wait_until(lambda: _current_state(zk, serving, segment) == "OFFLINE", what="OFFLINE published")
    replica = serving.replica(segment)
    assert (replica.state, replica.error, replica.consumer) == (SegmentState.OFFLINE, None, None)
    publisher = LivePublisher(serving.instance, redis_client, "reset-test", 60.0, 30.0)
    live = {item.segmentName: item for item in publisher.collect()}
    assert (live[segment].consumerState, live[segment].phase) == ("NOT_CONSUMING", "ERROR")
    assert live[segment].stoppedReason == failed.stopped_reason
    assert live[segment].currentOffset == failed.next_offset
