"""The mirror of leadControllerResource with real leadership (tables.mirror.sync), against the
real ZooKeeper: live MASTERs only, leaderless_since from the cluster leader's records or the
sync's time, the cluster leader and RESOURCE_ENABLED in MirrorState."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tables.cluster.context import ClusterContext
from tables.mirror.sync import sync_cluster
from tables.models import LeadControllerPartition, MirrorState
from tests.cluster_fixtures import PATHS
from tests.tables import leaders as lc

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
NOW = 1_714_563_100_000
A, B = 9000, 9001


@pytest.fixture
def ctx(cluster, settings):
    return ClusterContext(cluster, PATHS, settings.REDIS_URL, now_ms=lambda: NOW)


def _sync(ctx, now_ms: int):
    report = sync_cluster(ctx, now_ms=now_ms)
    assert report.ok, report.lines()
    return report


def _mirrored() -> dict[int, tuple[str, int | None]]:
    """partition -> (controller, leaderless_since in epoch ms or None)."""
    return {
        p.partition_id: (
            p.controller,
            None if p.leaderless_since is None else int(p.leaderless_since.timestamp() * 1000),
        )
        for p in LeadControllerPartition.objects.all()
    }


def _half_and_half(zk) -> tuple[str, str]:
    """A live, B's LIVEINSTANCE gone; the view still names B MASTER of 12..23 (nobody rewrote
    it yet), A leads the cluster."""
    a, b = lc.controller(zk, A), lc.controller(zk, B, live=False)
    lc.set_view(zk, {i: a if i < 12 else b for i in range(24)})
    lc.lead(zk, A)
    return a, b


def test_a_master_without_a_live_instance_counts_as_no_master(ctx, zk):
    a, b = _half_and_half(zk)

    report = _sync(ctx, NOW)

    got = _mirrored()
    assert {i: got[i] for i in range(12)} == dict.fromkeys(range(12), (a, None))
    assert {i: got[i] for i in range(12, 24)} == dict.fromkeys(range(12, 24), ("", NOW))
    assert report.zk_round_trips == 2  # the leader znode and the config ride with the instances
    assert report.lead_leaderless == 12
    state = MirrorState.objects.get(name="zk")
    assert (state.cluster_leader, state.lead_resource_enabled) == (a, True)
    assert f"cluster leader {a}, resource enabled, 12 partitions" in "\n".join(report.lines())

    # Still leaderless later: the start stays; once B is live again it leads them.
    _sync(ctx, NOW + 5_000)
    assert _mirrored()[12] == ("", NOW)
    lc.controller(zk, B)
    _sync(ctx, NOW + 10_000)
    assert set(_mirrored().values()) == {(a, None), (b, None)}
    assert [p for p, (c, _) in _mirrored().items() if c == b] == list(range(12, 24))


def test_a_stale_view_with_every_controller_dead_is_all_leaderless(ctx, zk):
    a = lc.controller(zk, A, live=False)
    lc.set_view(zk, dict.fromkeys(range(24), a))  # nobody is left to rewrite it

    _sync(ctx, NOW)

    assert set(_mirrored().values()) == {("", NOW)}
    state = MirrorState.objects.get(name="zk")
    assert (state.cluster_leader, state.lead_resource_enabled) == ("", True)


def test_leaderless_since_is_when_the_cluster_leader_recorded_the_loss(ctx, zk):
    a, b = _half_and_half(zk)
    lost_at = NOW - 42_000
    lc.change(12, "", b, NOW - 3_600_000, "unassigned")
    lc.change(12, b, "", lost_at, f"{b} is not live", cluster_leader=a)  # the latest: the loss
    lc.change(13, b, "", NOW - 90_000, "rebalance")
    lc.change(13, "", b, NOW - 80_000, "rebalance")  # the latest gave it a MASTER: B since died
    lc.change(0, a, "", NOW - 70_000)  # led again now: a stale record does not matter

    _sync(ctx, NOW)

    got = _mirrored()
    assert got[12] == ("", lost_at)
    assert got[13] == ("", NOW)  # B's death was not recorded: when the mirror first saw it
    assert got[14] == ("", NOW)  # no record at all
    assert got[0] == (a, None)

    # The cluster leader records the loss of 13 only after the mirror saw it: its time wins.
    lc.change(13, b, "", NOW - 10_000, f"{b} is not live", cluster_leader=a)
    _sync(ctx, NOW + 5_000)
    got = _mirrored()
    assert (got[12], got[13], got[14]) == (("", lost_at), ("", NOW - 10_000), ("", NOW))


def test_a_master_given_after_the_mirrored_start_restarts_the_clock(ctx, zk):
    _half_and_half(zk)
    _sync(ctx, NOW)
    assert _mirrored()[15] == ("", NOW)
    # Between two syncs: C took 15 and died before the mirror saw it as MASTER.
    lc.change(15, "", lc.controller_id(9002), NOW + 1_000, "unassigned", leaderless_ms=1_000)

    _sync(ctx, NOW + 5_000)

    assert _mirrored()[15] == ("", NOW + 5_000)


def test_a_disabled_resource_leaves_every_table_to_the_cluster_leader(ctx, zk):
    a = lc.controller(zk, A)
    lc.set_view(zk, {})  # controllers give up every partition while the resource is disabled
    lc.set_resource_enabled(zk, False)
    lc.lead(zk, A)

    report = _sync(ctx, NOW)

    assert set(_mirrored().values()) == {("", None)}  # no MASTER, but led: not leaderless
    assert report.lead_leaderless == 0
    state = MirrorState.objects.get(name="zk")
    assert (state.cluster_leader, state.lead_resource_enabled) == (a, False)

    lc.resign(zk)  # no cluster leader: nobody leads any table
    _sync(ctx, NOW + 5_000)
    assert set(_mirrored().values()) == {("", NOW + 5_000)}
    assert MirrorState.objects.get(name="zk").cluster_leader == ""


def test_leaderless_partitions_cost_one_query_not_one_per_partition(ctx, zk):
    a, b = lc.controller(zk, A), lc.controller(zk, B)
    lc.set_view(zk, {i: a if i < 12 else b for i in range(24)})
    lc.lead(zk, A)
    _sync(ctx, NOW)
    with CaptureQueriesContext(connection) as all_led:
        _sync(ctx, NOW + 5_000)

    zk.delete(PATHS.liveinstance(b))
    _sync(ctx, NOW + 10_000)  # the partitions' rows change here
    for partition in range(12, 24):
        lc.change(partition, b, "", NOW + 8_000)
    with CaptureQueriesContext(connection) as half_leaderless:
        _sync(ctx, NOW + 15_000)

    assert set(_mirrored().values()) == {(a, None), ("", NOW + 8_000)}
    # At most the changes' read and the rows' one UPDATE more, not a query per partition.
    assert len(half_leaderless) <= len(all_led) + 2
