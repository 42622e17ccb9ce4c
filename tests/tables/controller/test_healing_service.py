"""The healing manager against the real ZooKeeper and Redis stream: every repair case of Pinot's
RealtimeSegmentValidationManager, error resets, orphan uploads, the per-table lock, and the race
between a slow committer and the healer (never two CONSUMING segments in one partition)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from tables.cluster.context import ClusterContext
from tables.controller.healing import HealingSettings, RealtimeSegmentValidationManager
from tables.controller.llc import CommitRejected, CommittingSegment, LLCSegmentManager
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import PauseState, with_pause_state
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import switch_stream_type
from tables.models import DurableCounter
from tables.redisconn import get_redis
from tables.segments.deepstore import DeepStore
from tables.streams.redis_streams import FIRST_OFFSET, RedisTopicAdmin
from tables.zk import codec
from tables.zk.messages import message_ids, parse_state_transition, read_message
from tables.zk.records import read_record, update_record
from tests.cluster_fixtures import PATHS, load

pytestmark = [pytest.mark.zk, pytest.mark.redis]
TABLE = "githubEvents_REALTIME"
GUARD_MS = 300_000


class Clock:
    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def ctx(servers, zk, settings, clock):
    return ClusterContext(zk, PATHS, settings.REDIS_URL, now_ms=clock)


@pytest.fixture
def admin(settings):
    return RedisTopicAdmin(get_redis(settings.REDIS_URL))


def _create(ctx, topic, replication=2):
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic, {})
    rest["segmentsConfig"]["replication"] = str(replication)
    manager = ResourceManager(ctx)
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(rest)


def _ideal(zk):
    return read_record(zk, PATHS.idealstate(TABLE)).record.map_fields


def _partition(zk, partition):
    return {
        s: states
        for s, states in _ideal(zk).items()
        if LLCSegmentName.parse(s).partition_group_id == partition
    }


def _consuming(zk, partition):
    return sorted(s for s, st in _partition(zk, partition).items() if "CONSUMING" in st.values())


def _meta(zk, segment):
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def _committing(segment, end):
    return CommittingSegment(segment, end, 10, 1, 2, 7, 7, 100, f"file:///x/{segment}")


def _run(ctx, **settings):
    manager = RealtimeSegmentValidationManager(ctx, HealingSettings(**settings))
    return manager.run_table("githubEvents", run_id=uuid.uuid4().hex[:8], trigger="test")


def _step1(ctx, segment, end):
    """The controller's commit step 1 only (it 'died' after it)."""
    llc = LLCSegmentManager(ctx)
    return llc._step1_mark_done(PATHS.segment(TABLE, segment), _committing(segment, end))


def _step1_and_2(ctx, segment, end):
    llc = LLCSegmentManager(ctx)
    config = llc.resources.get_table_config(TABLE)
    committing = _committing(segment, end)
    done = llc._step1_mark_done(PATHS.segment(TABLE, segment), committing)
    meta, _ = llc._step2_next_segment(config, LLCSegmentName.parse(segment), committing, done)
    return meta.segment_name


def test_controller_died_after_step1_is_repaired_after_the_guard(ctx, zk, topic, clock):
    _create(ctx, topic)
    (segment,) = _consuming(zk, 0)
    _step1(ctx, segment, 1)
    early = _run(ctx)
    assert early.actions == [] and any("DONE but still CONSUMING" in w for w in early.waiting)
    clock.offset_ms = GUARD_MS + 1000
    report = _run(ctx)
    (action,) = [a for a in report.actions if a.partition == 0]
    assert action.kind == "commitStoppedAfterStep1"
    assert set(_partition(zk, 0)[segment].values()) == {"ONLINE"}
    (new,) = _consuming(zk, 0)
    assert action.new_segment == new and _meta(zk, new).start_offset == "1"
    assert LLCSegmentName.parse(new).sequence_number == 1
    assert _run(ctx).actions == []  # converged: a second run does nothing


def test_controller_died_after_step2_adopts_the_next_segment(ctx, zk, topic, clock):
    _create(ctx, topic)
    (segment,) = _consuming(zk, 1)
    following = _step1_and_2(ctx, segment, 2)
    clock.offset_ms = GUARD_MS + 1000
    (action,) = [a for a in _run(ctx).actions if a.partition == 1]
    assert action.kind == "commitStoppedAfterStep2" and action.new_segment == following
    assert _consuming(zk, 1) == [following]
    assert set(_partition(zk, 1)[segment].values()) == {"ONLINE"}


def test_all_replicas_offline_consume_again_from_the_start(ctx, zk, topic, clock):
    _create(ctx, topic)
    (segment,) = _consuming(zk, 2)
    llc = LLCSegmentManager(ctx)
    for server in _partition(zk, 2)[segment]:
        llc.segment_stopped_consuming(TABLE, segment, server)
    (action,) = [a for a in _run(ctx).actions if a.partition == 2]
    assert action.kind == "allReplicasOffline" and not action.data_loss
    assert set(_partition(zk, 2)[segment].values()) == {"OFFLINE"}
    (new,) = _consuming(zk, 2)
    assert _meta(zk, new).start_offset == _meta(zk, segment).start_offset


@pytest.mark.django_db
def test_offsets_the_stream_dropped_are_skipped_and_recorded(ctx, zk, topic, admin):
    _create(ctx, topic)
    (segment,) = _consuming(zk, 3)
    admin.produce(topic, 3, [b'{"id": "2"}'] * 5, now_ms=0)
    admin.trim_before(topic, 3, 6)
    llc = LLCSegmentManager(ctx)
    for server in _partition(zk, 3)[segment]:
        llc.segment_stopped_consuming(TABLE, segment, server)
    (action,) = [a for a in _run(ctx).actions if a.partition == 3]
    assert action.data_loss and "data loss" in action.detail
    (new,) = _consuming(zk, 3)
    meta = _meta(zk, new)
    assert meta.start_offset == "6"
    assert meta.custom_map == {
        "consumption.previousOffset": _meta(zk, segment).start_offset,
        "consumption.startReason": "dataLoss",
    }
    assert DurableCounter.value_of("llcStreamDataLoss", "githubEvents") == 1


def test_no_consuming_segment_after_an_online_one_gets_one_from_its_end(ctx, zk, topic):
    _create(ctx, topic)
    (segment,) = _consuming(zk, 0)
    _step1(ctx, segment, 1)

    def online(record):
        out = record.copy()
        out.map_fields[segment] = {i: "ONLINE" for i in out.map_fields[segment]}
        return out

    update_record(zk, PATHS.idealstate(TABLE), online)
    (action,) = [a for a in _run(ctx).actions if a.partition == 0]
    assert action.kind == "noConsumingSegment"
    assert _meta(zk, _consuming(zk, 0)[0]).start_offset == "1"


def test_a_new_stream_partition_gets_sequence_zero_from_earliest(ctx, zk, topic, admin):
    _create(ctx, topic)
    admin.add_partitions(topic, 5)
    (action,) = _run(ctx).actions
    assert action.kind == "newPartition" and action.partition == 4
    (new,) = _consuming(zk, 4)
    assert LLCSegmentName.parse(new).sequence_number == 0
    assert _meta(zk, new).start_offset == str(FIRST_OFFSET)  # an empty partition's earliest


def test_a_paused_table_is_not_repaired_but_reported(ctx, zk, topic):
    _create(ctx, topic)
    (segment,) = _consuming(zk, 2)
    llc = LLCSegmentManager(ctx)
    for server in _partition(zk, 2)[segment]:
        llc.segment_stopped_consuming(TABLE, segment, server)
    update_record(
        zk, PATHS.idealstate(TABLE), lambda r: with_pause_state(r, PauseState(paused=True))
    )
    report = _run(ctx)
    assert report.actions == [] and any("paused" in s for s in report.skipped)
    assert _consuming(zk, 2) == []


def test_a_run_that_cannot_take_the_lock_does_nothing(ctx, zk, topic):
    _create(ctx, topic)
    lock = ctx.client.lock(f"{PATHS.controller}/LOCKS/healing/{TABLE}", "someone")
    assert lock.acquire(timeout=5)
    try:
        report = _run(ctx, lock_timeout_s=0.2)
    finally:
        lock.release()
    assert report.actions == [] and "holds its lock" in report.skipped[0]


def _external_error(zk, segment, instance):
    path = PATHS.externalview(TABLE)
    record = read_record(zk, path)
    if record is None:
        ideal = read_record(zk, PATHS.idealstate(TABLE)).record
        base = ideal.copy()
        zk.create(path, codec.encode(base), makepath=True)
        record = read_record(zk, path)

    def error(rec):
        out = rec.copy()
        out.map_fields[segment] = {**out.map_fields.get(segment, {}), instance: "ERROR"}
        return out

    update_record(zk, path, error)


def test_error_replicas_are_reset_with_a_state_transition_message(ctx, zk, topic):
    _create(ctx, topic)
    (segment,) = _consuming(zk, 1)
    replicas = sorted(_partition(zk, 1)[segment])
    for instance in replicas:
        _external_error(zk, segment, instance)
    report = _run(ctx)
    (action,) = [a for a in report.actions if a.kind == "errorReset"]
    assert action.segment == segment and list(action.instances) == replicas
    for instance in replicas:
        (msg_id,) = message_ids(zk, PATHS, instance)
        request = parse_state_transition(read_message(zk, PATHS, instance, msg_id))
        assert (request.segment, request.from_state, request.to_state) == (
            segment,
            "ERROR",
            "OFFLINE",
        )
    again = _run(ctx)  # a reset still pending is not sent twice
    assert [a for a in again.actions if a.kind == "errorReset"] == []
    assert all(len(message_ids(zk, PATHS, i)) == 1 for i in replicas)


def test_orphan_uploads_older_than_the_retention_are_deleted(ctx, zk, topic, tmp_path):
    _create(ctx, topic)
    store = DeepStore.from_uri(tmp_path.as_uri())
    (segment,) = _consuming(zk, 0)
    folder = tmp_path / "githubEvents"
    folder.mkdir()
    old = folder / f"{segment}.tmp.{uuid.uuid4().hex}"
    young = folder / f"{segment}.tmp.{uuid.uuid4().hex}"
    kept = folder / f"{segment}.tmp.{uuid.uuid4().hex}"
    not_tmp = folder / f"{segment}.tmp.not-a-uuid"
    for path in (old, young, kept, not_tmp):
        path.write_bytes(b"x")
    stale = time.time() - 7200
    for path in (old, kept, not_tmp):
        os.utime(path, (stale, stale))

    def done_with_url(record):
        out = record.copy()
        out.simple_fields["segment.realtime.status"] = "DONE"
        out.simple_fields["segment.download.url"] = kept.as_uri()
        return out

    update_record(zk, PATHS.segment(TABLE, segment), done_with_url)
    manager = RealtimeSegmentValidationManager(ctx, deep_store=lambda: store)
    report = manager.run_table(TABLE, run_id="r", trigger="test")
    deleted = [a for a in report.actions if a.kind == "orphanUploadDeleted"]
    assert [a.segment for a in deleted] == [segment]
    assert not old.exists() and young.exists() and kept.exists() and not_tmp.exists()


def _invariants(zk):
    ideal = _ideal(zk)
    names = set(zk.get_children(PATHS.segments(TABLE)))
    assert set(ideal) <= names, "a segment in the IdealState has no metadata"
    for partition in range(4):
        assert len(_consuming(zk, partition)) <= 1, _partition(zk, partition)


@pytest.mark.parametrize("healer_first", [True, False])
def test_a_slow_committer_and_the_healer_never_make_two_consuming_segments(
    servers, zk, settings, topic, healer_first
):
    """The committer finished step 2 and is slow; the healer is past the guard. Whichever writes
    the IdealState first, the other one's write is refused and nothing is left half-done."""
    late = Clock()
    late.offset_ms = GUARD_MS + 1000
    committer_ctx = ClusterContext(zk, PATHS, settings.REDIS_URL, now_ms=Clock())
    healer_ctx = ClusterContext(zk, PATHS, settings.REDIS_URL, now_ms=late)
    _create(committer_ctx, topic)
    llc = LLCSegmentManager(committer_ctx)
    config = llc.resources.get_table_config(TABLE)
    for partition in range(4):
        (segment,) = _consuming(zk, partition)
        committing = _committing(segment, 1)
        done = llc._step1_mark_done(PATHS.segment(TABLE, segment), committing)
        following, replicas = llc._step2_next_segment(
            config, LLCSegmentName.parse(segment), committing, done
        )

        def commit_step3(segment=segment, following=following, replicas=replicas, c=committing):
            try:
                added = llc._step3_idealstate(
                    config, c, following, replicas, PATHS.segment(TABLE, segment)
                )
            except CommitRejected:
                added = False
            if not added:
                llc._drop_next(TABLE, following)

        def heal():
            RealtimeSegmentValidationManager(healer_ctx).run_table(
                TABLE, run_id="race", trigger="test"
            )

        first, second = (heal, commit_step3) if healer_first else (commit_step3, heal)
        first()
        second()
        _invariants(zk)
        assert len(_consuming(zk, partition)) == 1
        assert _consuming(zk, partition) == [following.segment_name]


def test_concurrent_committers_and_healers_keep_one_consuming_segment(servers, zk, settings, topic):
    """Both at once, in threads, over several rounds: the invariants hold after each."""
    late = Clock()
    late.offset_ms = GUARD_MS + 1000
    committer_ctx = ClusterContext(zk, PATHS, settings.REDIS_URL, now_ms=late)
    healer_ctx = ClusterContext(zk, PATHS, settings.REDIS_URL, now_ms=late)
    _create(committer_ctx, topic, replication=1)
    errors: list[BaseException] = []
    for _ in range(3):
        barrier = threading.Barrier(5)

        def commit(partition, barrier=barrier):
            (segment,) = _consuming(zk, partition)
            barrier.wait()
            try:
                LLCSegmentManager(committer_ctx).commit_segment_metadata(
                    TABLE, _committing(segment, int(_meta(zk, segment).start_offset) + 1)
                )
            except CommitRejected:
                pass
            except BaseException as exc:
                errors.append(exc)

        def heal(barrier=barrier):
            barrier.wait()
            RealtimeSegmentValidationManager(healer_ctx).run_table(
                TABLE, run_id="race", trigger="test"
            )

        threads = [threading.Thread(target=commit, args=(p,)) for p in range(4)]
        threads.append(threading.Thread(target=heal))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors
        RealtimeSegmentValidationManager(healer_ctx).run_table(TABLE, run_id="r", trigger="t")
        _invariants(zk)
        assert all(len(_consuming(zk, p)) == 1 for p in range(4))
