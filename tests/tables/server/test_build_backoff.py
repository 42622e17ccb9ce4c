"""A deterministically failing build backs off (issue 23): a real consumer and committer, with the
server's `BuildHolds` on the real database and ZooKeeper, commit partition 0's segment through
the real completion endpoints (Django's test client standing for HTTP, this process leading the
table). The build (no Spark: `build_without_spark`) first fails as the builder refuses a config;
the failure is recorded, the consumer holds without asking the controller and nothing is built
again; a table config update (a changed fingerprint) makes it build and commit at once, and the
record goes. A transient failure is retried as before, without a record."""

from __future__ import annotations

import pytest
from django.conf import settings

from tables import build_backoffs, builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.models import FailedBuild
from tables.redisconn import get_redis
from tables.segments.errors import BuildError
from tables.server import consumer as consumer_module
from tables.server.build_holds import BuildHolds
from tables.server.committer import Committer
from tables.server.consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from tables.server.live import partition_live
from tables.server.local_segments import LocalSegments
from tables.streams.redis_streams import RedisStreamProvider
from tests.cluster_fixtures import load
from tests.ingest_cluster import table_config
from tests.poll import wait_until
from tests.tables.leaders import lead_every_partition
from tests.tables.server.test_committer_upload import ME, TABLE, controller  # noqa: F401
from tests.tables.test_stream_data_loss import ThroughDjango, build_without_spark

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db(transaction=True)]
REFUSED = "cannot build githubEvents__0__0: unsupported date-time pattern 'YYYY-ww'"


class Failed:
    """A finished build that failed (what the committer reads of a failed Celery result)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def ready(self) -> bool:
        return True

    def successful(self) -> bool:
        return False

    def get(self, timeout=None, propagate=True):
        return self.error

    def revoke(self) -> None:
        raise AssertionError("a finished build is not revoked")


def _setup(zk, topic):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    lead_every_partition(zk, ME)
    segment = next(s for s in manager.idealstate(TABLE) if s.startswith("githubEvents__0__"))
    return manager, segment, sorted(manager.idealstate(TABLE)[segment])[0]


def _consumer(topic, segment, replica, committer) -> SegmentConsumer:
    spec = ConsumingSegment(TABLE, segment, topic, 0, 1, 1, 3_600_000, 0)
    return SegmentConsumer(
        spec,
        RedisStreamProvider(get_redis(settings.REDIS_URL), topic),
        ThroughDjango(replica),
        committer,
        PartitionStats(TABLE, topic, 0),
        hold_s=0.2,
        fetch_timeout_ms=20,
        instance_id=replica,
    )


def _committer(replica, submit, tmp_path) -> Committer:
    return Committer(
        ThroughDjango(replica),
        builds.deep_store,
        submit,
        tmp_path / "work",
        poll_s=0.05,
        instance_id=replica,
        local=LocalSegments(tmp_path / "local"),
        holds=BuildHolds(context.current, replica),
    )


def test_a_deterministic_failure_holds_until_the_config_changes(
    controller,  # noqa: F811
    servers,
    topic,
    zk,
    tmp_path,
    monkeypatch,
):
    monkeypatch.setattr(consumer_module, "BUILD_HOLD_RECHECK_S", 0.2)
    manager, segment, replica = _setup(zk, topic)
    build = build_without_spark(tmp_path)
    submitted: list[str] = []
    state = {"refuse": True}

    def submit(table, name, staging_key, start, end, handover_key):
        submitted.append(name)
        if state["refuse"]:
            return Failed(BuildError(REFUSED))
        return build(table, name, staging_key, start, end, handover_key)

    consumer = _consumer(topic, segment, replica, _committer(replica, submit, tmp_path))
    consumer.start()
    try:
        wait_until(lambda: consumer.hold_reason, timeout=60, what="the consumer holds")
        assert consumer.phase is Phase.HOLDING
        assert consumer.hold_reason.startswith(f"build failed: BuildError: {REFUSED}; next try at")
        published = partition_live(consumer, now_ms=0, rows_per_second=0.0)  # the live state
        assert (published.phase, published.holdReason) == ("HOLDING", consumer.hold_reason)
        record = build_backoffs.read(TABLE, segment)
        assert record is not None and record.failures == 1 and record.servers == (replica,)
        assert record.next_retry_ms - record.last_failure_ms == 60_000
        # Today's loop would build again after 2 s: held, nothing is built within 5 s.
        with pytest.raises(TimeoutError):
            wait_until(lambda: len(submitted) > 1, timeout=5, what="a second build")
        state["refuse"] = False
        rest = table_config(topic)
        rest["metadata"] = {"customConfigs": {"buildFix": "1"}}
        manager.update_table(TABLE, rest)  # the fix: a new fingerprint, retried at once
        wait_until(lambda: consumer.phase is Phase.COMMITTED, timeout=60, what="committed")
    finally:
        consumer.stop()
        consumer.join(10)
    assert submitted == [segment, segment]
    assert not FailedBuild.objects.filter(table=TABLE, segment=segment).exists()


def test_a_transient_failure_is_retried_without_a_record(
    controller,  # noqa: F811
    servers,
    topic,
    zk,
    tmp_path,
):
    _manager, segment, replica = _setup(zk, topic)
    build = build_without_spark(tmp_path)
    submitted: list[str] = []

    def submit(table, name, staging_key, start, end, handover_key):
        submitted.append(name)
        if len(submitted) == 1:
            return Failed(OSError("the deep store is unreachable"))
        return build(table, name, staging_key, start, end, handover_key)

    consumer = _consumer(topic, segment, replica, _committer(replica, submit, tmp_path))
    consumer.start()
    try:
        wait_until(lambda: consumer.phase is Phase.COMMITTED, timeout=60, what="committed")
    finally:
        consumer.stop()
        consumer.join(10)
    assert submitted == [segment, segment]
    assert build_backoffs.read(TABLE, segment) is None


def test_another_replica_does_not_build_a_held_segment(controller, servers, topic, zk, tmp_path):  # noqa: F811
    _manager, segment, replica = _setup(zk, topic)
    holds = BuildHolds(context.current, "Server_other_1")
    current = holds.fingerprint(TABLE)
    assert current is not None
    free = holds.hold_soon(TABLE, segment)  # read ahead (tables.server.hold_ahead): no record
    assert free() is None
    holds.failed(TABLE, segment, current, BuildError(REFUSED))  # another replica's failure
    early = holds.hold_soon(TABLE, segment)()
    assert early is not None and early == holds.hold_of(TABLE, segment)
    submitted: list[str] = []

    def submit(*args):
        submitted.append(args[1])
        raise AssertionError("a held build is not submitted")

    consumer = _consumer(topic, segment, replica, _committer(replica, submit, tmp_path))
    consumer.start()
    try:
        wait_until(lambda: consumer.hold_reason, timeout=60, what="the consumer holds")
    finally:
        consumer.stop()
        consumer.join(10)
    assert submitted == []
    assert build_backoffs.read(TABLE, segment).failures == 1  # nothing built, nothing counted
