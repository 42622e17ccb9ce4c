"""The lead-controller health of `/metrics`, read from ZooKeeper at scrape time by whichever process
serves `/metrics` (a controller or the web), so it does not depend on the mirror sync (the worker)
nor on any controller being alive.

Contract:
- `read_live_leadership() -> LiveLeadership | None` reads, in five ZooKeeper reads, the live
  instances, leadControllerResource's IdealState (its partition count) and ExternalView, the
  cluster leader (`/CONTROLLER/LEADER`) and the resource's RESOURCE_ENABLED. A partition's
  `master` is its ExternalView MASTER only while that controller has a live instance: the view is
  written by the cluster leader, so a dead (or frozen past its session) controller's view is
  stale and its partitions read as without a MASTER, as `tables.mirror.leaders` decides.
- None (the caller then uses the mirror's leadership rows) when ZooKeeper cannot be reached or
  read, when the cluster has no LIVEINSTANCES (not set up) or no leadControllerResource. After a
  failure ZooKeeper is not asked again for `RETRY_AFTER_S` seconds, so a scrape during an outage
  waits at most once for the connection timeout (ZK_TIMEOUT_SECONDS), then answers from the
  mirror at once. `forget()` clears that (tests).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from tables.cluster.context import current
from tables.cluster.errors import Unavailable
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.zk.errors import NoNode, ZooKeeperError
from tables.zk.interface import ZkStore
from tables.zk.paths import ClusterPaths
from tables.zk.records import read_record

__all__ = ["RETRY_AFTER_S", "LiveLeadership", "forget", "read_live_leadership"]

log = logging.getLogger(__name__)

RETRY_AFTER_S = 30.0
CONTROLLER_PREFIX = "Controller_"
_lock = threading.Lock()
_down_until = 0.0


@dataclass(frozen=True)
class LiveLeadership:
    """leadControllerResource as ZooKeeper has it now."""

    live_controllers: list[str]
    cluster_leader: str  # "" when nobody holds /CONTROLLER/LEADER
    resource_enabled: bool
    masters: dict[int, str]  # partition -> its live MASTER, "" for none


def forget() -> None:
    """Ask ZooKeeper again at the next scrape, even right after a failure."""
    global _down_until
    with _lock:
        _down_until = 0.0


def read_live_leadership() -> LiveLeadership | None:
    """See the module docstring."""
    global _down_until
    with _lock:
        if time.monotonic() < _down_until:
            return None
    try:
        ctx = current()
        return _read(ctx.client, ctx.paths)
    except (Unavailable, ZooKeeperError, ValueError) as exc:
        log.warning("/metrics: leadership from the mirror, ZooKeeper cannot be read: %s", exc)
        with _lock:
            _down_until = time.monotonic() + RETRY_AFTER_S
        return None


def _read(client: ZkStore, paths: ClusterPaths) -> LiveLeadership | None:
    try:
        live = set(client.get_children(paths.liveinstances))
    except NoNode:
        return None  # no cluster here
    ideal = read_record(client, paths.idealstate(LEAD_CONTROLLER_RESOURCE))
    if ideal is None:
        return None
    fields = ideal.record.simple_fields
    count = _int(fields.get("NUM_PARTITIONS")) or len(
        set(ideal.record.map_fields) | set(ideal.record.list_fields)
    )
    if not count:
        return None
    view = read_record(client, paths.externalview(LEAD_CONTROLLER_RESOURCE))
    leader = read_record(client, paths.controller_leader)
    config = read_record(client, paths.resource_config(LEAD_CONTROLLER_RESOURCE))
    name = leader.record.id if leader is not None else ""
    if name and not name.startswith(CONTROLLER_PREFIX):  # Helix writes <host>_<port>
        name = CONTROLLER_PREFIX + name
    enabled = config is None or config.record.simple_fields.get("RESOURCE_ENABLED") != "false"
    states = view.record.map_fields if view is not None else {}
    masters = {}
    for i in range(count):
        replicas = states.get(partition_name(i), {})
        up = sorted(c for c, s in replicas.items() if s == "MASTER" and c in live)
        masters[i] = up[0] if up else ""
    controllers = sorted(n for n in live if n.startswith(CONTROLLER_PREFIX))
    return LiveLeadership(controllers, name, enabled, masters)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None
