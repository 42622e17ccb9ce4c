"""The Helix cluster leader among the controllers: `/<cluster>/CONTROLLER/LEADER`.

Contract:
- As Helix elects its controller: every candidate tries to create the ephemeral znode
  `/CONTROLLER/LEADER` holding a LiveInstance ZNRecord whose id is the candidate's Helix
  controller id `<host>_<port>` (no `Controller_` prefix, reference §1.1) and whose SESSION_ID is
  the candidate's session. Whoever created it leads until its session ends (crash, expiry) or it
  resigns (`resign`, a graceful stop); the others see the znode vanish through their watch and
  try again. ZooKeeper's create is atomic, so there is never more than one leader znode.
- `try_lead` answers whether this candidate leads now: True when it created the znode or the
  znode already names it on this session. A leader znode left by an older session of the same
  candidate (a restart before that session expired) is deleted and taken at once.
- On each new leadership `/CONTROLLER/HISTORY` gets an entry as Helix writes it (listField
  `HISTORY`, `{DATE=<UTC>, CONTROLLER=<id>, TIME=<ms>}`, the latest 10 kept).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.errors import BadVersion, NodeExists, NoNode
from tables.zk.interface import ZkStore
from tables.zk.participants import live_instance, session_id_of
from tables.zk.paths import ClusterPaths
from tables.zk.records import create_record, read_record
from tables.zk.watches import read_watched

__all__ = ["HISTORY_KEPT", "LeaderElection", "cluster_leader_id"]

HISTORY_KEPT = 10


def cluster_leader_id(client: ZkStore, paths: ClusterPaths) -> str | None:
    """The Helix controller id (`<host>_<port>`) in `/CONTROLLER/LEADER`, or None."""
    found = read_record(client, paths.controller_leader)
    return None if found is None else found.record.id


class LeaderElection:
    """One candidate (`leader_id` = `<host>_<port>`) of the cluster leader election."""

    def __init__(self, leader_id: str, wake: Callable[[], None]) -> None:
        self.leader_id = leader_id
        self._wake = wake

    def try_lead(self, client: ZkStore, paths: ClusterPaths) -> bool:
        """Lead if nobody does; True when this candidate is the leader on its current session."""
        session = session_id_of(client)
        found = read_watched(client, paths.controller_leader, self._wake)
        if found is not None:
            record = codec.decode(found[0]) if found[0] else None
            if record is None or record.id != self.leader_id:
                return False
            if record.simple_fields.get("SESSION_ID") == session:
                return True
            try:  # ours, from an older session that has not expired yet: take it back
                client.delete(paths.controller_leader, version=found[1].version)
            except (NoNode, BadVersion):
                return False
        try:
            create_record(
                client,
                paths.controller_leader,
                live_instance(self.leader_id, session),
                ephemeral=True,
            )
        except NodeExists:
            read_watched(client, paths.controller_leader, self._wake)
            return False
        self._append_history(client, paths)
        return True

    def resign(self, client: ZkStore, paths: ClusterPaths) -> None:
        """Give the leadership up (a graceful stop): delete the znode if it is ours."""
        found = read_record(client, paths.controller_leader)
        if found is None or found.record.id != self.leader_id:
            return
        with contextlib.suppress(NoNode, BadVersion):
            client.delete(paths.controller_leader, version=found.version)

    def _append_history(self, client: ZkStore, paths: ClusterPaths) -> None:
        now = time.time()
        entry = (
            "{DATE="
            + time.strftime("%Y-%m-%d-%H:%M:%S", time.gmtime(now))
            + f", CONTROLLER={self.leader_id}, TIME={int(now * 1000)}"
            + "}"
        )
        path = f"{paths.controller}/HISTORY"
        for _ in range(5):  # compare-and-set, retried on a lost race
            try:
                data, stat = client.get(path)
            except NoNode:
                with contextlib.suppress(NodeExists):
                    record = ZNRecord(id="HISTORY", list_fields={"HISTORY": [entry]})
                    create_record(client, path, record)
                    return
                continue
            record = codec.decode(data) if data else ZNRecord(id="HISTORY")
            history = [*record.list_fields.get("HISTORY", []), entry][-HISTORY_KEPT:]
            record.list_fields["HISTORY"] = history
            try:
                client.set(path, codec.encode(record), version=stat.version)
                return
            except BadVersion:
                continue
