"""The lead controller gauges of /metrics (monitoring.controller_metrics), from a mirror synced
from the real ZooKeeper and from ZooKeeper itself at scrape time (`monitoring.leadership_live`):
Pinot's controllerLeaderPartitionCount, pinotControllerLeader and
pinotLeadControllerResourceEnabled per controller, and the console's leaderless partitions. A
controller that dies after the mirror's last sync reads as dead at once."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from monitoring import leadership_live
from monitoring.controller_metrics import ControllerCollector
from tables.cluster.context import ClusterContext
from tables.mirror.sync import sync_cluster
from tests.cluster_fixtures import PATHS
from tests.monitoring.test_controller_metrics import labels, samples, scrape
from tests.tables import leaders as lc

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
NOW = 1_714_563_100_000
A, B, C, D = 9000, 9001, 9002, 9003


@pytest.fixture(autouse=True)
def ask_zookeeper() -> None:
    """No back-off left by an earlier test's unreachable ZooKeeper."""
    leadership_live.forget()


def _sync(zk, settings, now_ms: int = NOW) -> None:
    report = sync_cluster(ClusterContext(zk, PATHS, settings.REDIS_URL), now_ms=now_ms)
    assert report.ok, report.lines()


def _collect(now_ms: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The families as a scrape at `now_ms` sees them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControllerCollector(now=lambda: lc.moment(now_ms)))
    return samples(generate_latest(registry).decode())


@pytest.fixture
def three_controllers(cluster):
    """A and B live, C dead (the view still names it MASTER of 20..23), D live and idle;
    A is the cluster leader. The cluster leader recorded the loss of partition 20 2 min ago."""
    a, b = lc.controller(cluster, A), lc.controller(cluster, B)
    c, d = lc.controller(cluster, C, live=False), lc.controller(cluster, D)
    lc.set_view(cluster, {i: a if i < 10 else b if i < 20 else c for i in range(24)})
    lc.lead(cluster, A)
    lc.change(20, c, "", NOW - 120_000, f"{c} is not live", cluster_leader=a)
    return a, b, c, d


def test_the_leadership_gauges_count_live_masters_only(three_controllers, zk, settings):
    a, b, _c, d = three_controllers  # C, dead, has no series
    _sync(zk, settings)

    got = _collect(NOW + 30_000)

    assert got["pinot_controller_LeaderPartitionCount_Value"] == {
        labels(controller=a): 10,
        labels(controller=b): 10,
        labels(controller=d): 0,  # live, no partition: Pinot's gauge reads 0
    }
    assert got["pinot_controller_pinotControllerLeader_Value"] == {
        labels(controller=a): 1,
        labels(controller=b): 0,
        labels(controller=d): 0,
    }
    assert got["pinot_controller_pinotLeadControllerResourceEnabled_Value"] == {
        labels(controller=a): 1,
        labels(controller=b): 1,
        labels(controller=d): 1,
    }
    assert got["pinot_console_lead_controller_partitions_without_master"] == {(): 4}
    # 20: since the cluster leader's record; 21..23: since the sync that first saw them.
    assert got["pinot_console_lead_controller_leaderless_seconds"] == {
        labels(partition="20"): 150,
        labels(partition="21"): 30,
        labels(partition="22"): 30,
        labels(partition="23"): 30,
    }


def test_the_families_reach_the_metrics_endpoint(three_controllers, zk, settings, client):
    a, _b, _c, _d = three_controllers
    _sync(zk, settings)

    got = samples(scrape(client))

    assert got["pinot_console_lead_controller_partitions_without_master"] == {(): 4}
    assert set(got["pinot_console_lead_controller_leaderless_seconds"]) == {
        labels(partition=str(p)) for p in (20, 21, 22, 23)
    }
    assert got["pinot_controller_pinotControllerLeader_Value"][labels(controller=a)] == 1


def test_a_disabled_resource_reads_0_and_its_tables_are_not_leaderless(cluster, zk, settings):
    a, b = lc.controller(cluster, A), lc.controller(cluster, B)
    lc.set_view(cluster, {})
    lc.set_resource_enabled(cluster, False)
    lc.lead(cluster, B)
    _sync(zk, settings)

    got = _collect(NOW)

    assert got["pinot_controller_pinotLeadControllerResourceEnabled_Value"] == {
        labels(controller=a): 0,
        labels(controller=b): 0,
    }
    assert got["pinot_controller_pinotControllerLeader_Value"] == {
        labels(controller=a): 0,
        labels(controller=b): 1,
    }
    assert got["pinot_controller_LeaderPartitionCount_Value"] == {
        labels(controller=a): 0,
        labels(controller=b): 0,
    }
    # The cluster leader leads every table (Pinot's fallback): no partition lacks a leader.
    assert got["pinot_console_lead_controller_partitions_without_master"] == {(): 0}
    assert got["pinot_console_lead_controller_leaderless_seconds"] == {}

    lc.resign(zk)  # and now nobody leads
    _sync(zk, settings, NOW + 1_000)
    got = _collect(NOW + 11_000)
    assert got["pinot_console_lead_controller_partitions_without_master"] == {(): 24}
    assert set(got["pinot_console_lead_controller_leaderless_seconds"].values()) == {10}
    assert set(got["pinot_controller_pinotControllerLeader_Value"].values()) == {0}


def test_a_dead_cluster_leader_znode_holder_still_reads_as_leader(cluster, zk, settings):
    """The leader znode is ephemeral: whoever it names holds a session, even if its live
    instance is missing (a controller between its election and its registration)."""
    a = lc.controller(cluster, A)
    lc.set_view(cluster, dict.fromkeys(range(24), a))
    lc.lead(cluster, B)  # B won the election but has no LIVEINSTANCE
    _sync(zk, settings)

    got = _collect(NOW)

    assert got["pinot_controller_pinotControllerLeader_Value"] == {
        labels(controller=a): 0,
        labels(controller=lc.controller_id(B)): 1,
    }
    assert got["pinot_controller_pinotLeadControllerResourceEnabled_Value"] == {
        labels(controller=a): 1
    }


def test_a_controller_dead_since_the_last_sync_leaves_its_partitions_without_master(
    three_controllers, zk, settings
):
    """The mirror (synced by the worker) still has A as MASTER of 0..9; ZooKeeper no longer has
    A's live instance (dead, or frozen past its session): the scrape reads ZooKeeper and counts
    A's partitions as without a MASTER, with no since-time the mirror has not seen."""
    a, b, _c, d = three_controllers
    _sync(zk, settings)
    zk.delete(PATHS.liveinstance(a))

    got = _collect(NOW + 30_000)

    assert got["pinot_console_lead_controller_partitions_without_master"] == {(): 14}
    assert got["pinot_controller_LeaderPartitionCount_Value"] == {
        labels(controller=b): 10,
        labels(controller=d): 0,
    }
    assert set(got["pinot_console_lead_controller_leaderless_seconds"]) == {
        labels(partition=str(p)) for p in (20, 21, 22, 23)
    }
    assert labels(controller=a) in got["pinot_controller_pinotControllerLeader_Value"]
