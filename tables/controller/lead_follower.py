"""This controller's partitions of leadControllerResource: which tables it leads, in memory.

Contract (reference §8, pinot-round2 §D.1; the plan itself is `tables.domain.lead_assignment`):
- `leads(table)` answers from memory, without a ZooKeeper read: True when this controller is
  MASTER of the table's partition (`lead_partition(raw name)`), or, while the resource is disabled
  (RESOURCE_ENABLED "false"), when it is the Helix cluster leader (Pinot's fallback). It is False
  while the session is not connected (Pinot: `!isConnected()` answers NOT_LEADER) and once the
  controller is stopping.
- Giving up is immediate: a watch on the resource's IdealState drops the partitions no longer
  assigned to this controller in memory on kazoo's event thread; the session listener drops all
  of them at once when the session is LOST (expired: a new owner may already hold them).
- Taking over happens in `sync`, on the controller's loop: a partition is first claimed in this
  controller's CURRENTSTATE (`/INSTANCES/<id>/CURRENTSTATES/<session>/leadControllerResource`,
  `CURRENT_STATE` MASTER), then confirmed by a fresh read of the assignment; only then does
  `leads` answer True for its tables. `claimed_ms` is ZooKeeper's mtime of the last claiming
  write: the moment from which this controller, not a former one, commits the gained tables.
  The cluster leader gives a partition to a controller only
  while no other live controller's CURRENTSTATE holds it, so two controllers never act as MASTER
  of one partition together.
- `sync` returns what changed (gained, lost), so the caller can rebuild per-table state: drop the
  tables' completion FSMs (they are rebuilt from ZooKeeper on the next call) and ask for a
  healing run at once. Partitions the watches gave up since the last `sync` count as lost (a
  partition given up and taken again in between is in both).
- `participant_history` records, in `/INSTANCES/<id>/HISTORY` (Helix's participant history),
  LAST_ONLINE_TIME on each new session and, on a graceful stop, LAST_OFFLINE_TIME with HANDOVER
  "true": the cluster leader then moves the partitions at once instead of after the delay.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tables.domain.lead_assignment import assignment_of, follow
from tables.domain.leadership import (
    DEFAULT_NUM_PARTITIONS,
    LEAD_CONTROLLER_RESOURCE,
    lead_partition,
    partition_name,
)
from tables.domain.names import raw_table_name
from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.errors import NodeExists, NoNode
from tables.zk.interface import ZkStore
from tables.zk.participants import session_id_of
from tables.zk.paths import ClusterPaths
from tables.zk.records import create_record, read_record, update_record
from tables.zk.watches import listen_session, watch_data

__all__ = ["LeadFollower", "history_path", "participant_history"]

log = logging.getLogger("tables.controller.leadership")


def history_path(paths: ClusterPaths, instance: str) -> str:
    return f"{paths.instance(instance)}/HISTORY"


def participant_history(client: ZkStore, paths: ClusterPaths, instance: str, **fields: str) -> None:
    """Set simpleFields of the participant's HISTORY record (created when missing)."""
    path = history_path(paths, instance)

    def put(record: ZNRecord) -> ZNRecord:
        record.simple_fields.update(fields)
        return record

    try:
        update_record(client, path, put)
    except NoNode:
        try:
            create_record(client, path, ZNRecord(id=instance, simple_fields=dict(fields)))
        except NodeExists:
            update_record(client, path, put)


def _enabled(data: bytes | None) -> bool:
    if not data:
        return True
    return codec.decode(data).simple_fields.get("RESOURCE_ENABLED") != "false"


class LeadFollower:
    """The partitions this controller (`instance_id`) is MASTER of, and the fallback flag."""

    def __init__(self, instance_id: str, wake: Callable[[], None]) -> None:
        self.instance_id = instance_id
        self._wake = wake
        self._lock = threading.Lock()
        self._held: frozenset[int] = frozenset()
        self._dropped: frozenset[int] = frozenset()  # given up by a watch since the last sync
        self._assignment: dict[int, str | None] = {}
        self._partitions = DEFAULT_NUM_PARTITIONS
        self._enabled = True
        self._cluster_leader = False
        self._connected = True
        self._stopping = False
        self._session: str | None = None
        self._written: tuple[str, frozenset[int]] | None = None
        self._watches: list[Any] = []
        self.claimed_ms: int | None = None

    # --- answers (any thread) ----------------------------------------------------------------
    def leads(self, table: str) -> bool:
        with self._lock:
            if not self._connected or self._stopping:
                return False
            if not self._enabled:
                return self._cluster_leader
            return lead_partition(raw_table_name(table), self._partitions) in self._held

    @property
    def held(self) -> frozenset[int]:
        with self._lock:
            return self._held

    @property
    def partitions(self) -> int:
        return self._partitions

    @property
    def enabled(self) -> bool:
        return self._enabled

    def set_cluster_leader(self, leading: bool) -> None:
        with self._lock:
            self._cluster_leader = leading

    def stop_leading(self) -> None:
        """A stop began: answer NOT_LEADER from now on (in-flight calls finish)."""
        with self._lock:
            self._stopping = True

    # --- watches (kazoo's event thread: memory only) --------------------------------------------
    def watch(self, client: ZkStore, paths: ClusterPaths) -> None:
        listen_session(client, self._on_session)
        self._watches = [
            watch_data(client, paths.idealstate(LEAD_CONTROLLER_RESOURCE), self._on_ideal),
            watch_data(client, paths.resource_config(LEAD_CONTROLLER_RESOURCE), self._on_config),
        ]

    def _on_session(self, state: str) -> None:
        with self._lock:
            self._connected = state == "CONNECTED"
            if state == "LOST" and (self._held or self._cluster_leader):
                log.warning("%s: ZooKeeper session lost: dropping all leadership", self.instance_id)
            if state == "LOST":
                self._dropped |= self._held
                self._held, self._cluster_leader = frozenset(), False
        self._wake()

    def _on_ideal(self, data: bytes | None, _stat: object) -> None:
        if data is None:
            return
        self._take_assignment(codec.decode(data))
        self._wake()

    def _on_config(self, data: bytes | None, _stat: object) -> None:
        enabled = _enabled(data)
        with self._lock:
            self._enabled = enabled
            if not enabled:
                self._dropped |= self._held
                self._held = frozenset()
        self._wake()

    def _take_assignment(self, ideal: ZNRecord) -> None:
        count = int(ideal.simple_fields.get("NUM_PARTITIONS", DEFAULT_NUM_PARTITIONS))
        assignment = assignment_of(ideal, count)
        with self._lock:
            self._partitions, self._assignment = count, assignment
            _, lost = follow(self.instance_id, assignment, self._held, self._enabled)
            self._dropped |= lost
            self._held = self._held - lost

    # --- the loop's step ------------------------------------------------------------------------
    def sync(self, client: ZkStore, paths: ClusterPaths) -> tuple[frozenset[int], frozenset[int]]:
        """Follow the assignment; returns (partitions gained, partitions lost)."""
        session = session_id_of(client)
        with self._lock:
            before, dropped, self._dropped = self._held, self._dropped, frozenset()
        if session != self._session:
            participant_history(
                client,
                paths,
                self.instance_id,
                LAST_ONLINE_TIME=str(_now_ms()),
                HANDOVER="false",
            )
            self._session, self._written = session, None
            self._drop_old_sessions(client, paths, session)
        self._refresh(client, paths)
        with self._lock:
            take, drop = follow(self.instance_id, self._assignment, self._held, self._enabled)
            if self._stopping:
                take = frozenset()
            self._held = self._held - drop
        if take:
            claimed = self._write_state(client, paths, session, self.held | take)  # claim first
            self.claimed_ms = claimed if claimed is not None else self.claimed_ms
            self._refresh(client, paths)  # then confirm
            with self._lock:
                confirmed = frozenset(
                    p for p in take if self._assignment.get(p) == self.instance_id
                )
                if self._enabled and not self._stopping:
                    self._held = self._held | confirmed
        self._write_state(client, paths, session, self.held)
        after = self.held
        return after - before, (before - after) | dropped

    def give_up(self, client: ZkStore, paths: ClusterPaths) -> frozenset[int]:
        """A graceful stop: hold nothing, say so in the CURRENTSTATE and the HISTORY."""
        with self._lock:
            lost, self._held, self._stopping = self._held, frozenset(), True
        if self._session is not None:
            self._write_state(client, paths, self._session, frozenset())
        participant_history(
            client, paths, self.instance_id, LAST_OFFLINE_TIME=str(_now_ms()), HANDOVER="true"
        )
        return lost

    def _drop_old_sessions(self, client: ZkStore, paths: ClusterPaths, session: str) -> None:
        """Delete this controller's CURRENTSTATES of earlier sessions (nobody reads them)."""
        folder = f"{paths.instance(self.instance_id)}/CURRENTSTATES"
        try:
            old = [s for s in client.get_children(folder) if s != session]
        except NoNode:
            return
        for name in old:
            with contextlib.suppress(NoNode):
                client.delete(f"{folder}/{name}", recursive=True)

    def _refresh(self, client: ZkStore, paths: ClusterPaths) -> None:
        ideal = read_record(client, paths.idealstate(LEAD_CONTROLLER_RESOURCE))
        config = read_record(client, paths.resource_config(LEAD_CONTROLLER_RESOURCE))
        enabled = config is None or config.record.simple_fields.get("RESOURCE_ENABLED") != "false"
        with self._lock:
            self._enabled = enabled
        if ideal is not None:
            self._take_assignment(ideal.record)

    def _write_state(
        self, client: ZkStore, paths: ClusterPaths, session: str, held: frozenset[int]
    ) -> int | None:
        """Write the CURRENTSTATE; returns the write's mtime (None when nothing changed)."""
        if self._written == (session, held):
            return None
        record = ZNRecord(
            id=LEAD_CONTROLLER_RESOURCE,
            simple_fields={
                "SESSION_ID": session,
                "STATE_MODEL_DEF": "MasterSlave",
                "STATE_MODEL_FACTORY_NAME": "DEFAULT",
                "BUCKET_SIZE": "0",
            },
            map_fields={partition_name(i): {"CURRENT_STATE": "MASTER"} for i in sorted(held)},
        )
        path = paths.currentstate(self.instance_id, session, LEAD_CONTROLLER_RESOURCE)
        data = codec.encode(record)
        try:
            mtime = client.set(path, data).mtime
        except NoNode:
            client.create(path, data, makepath=True)
            stat = client.exists(path)
            mtime = stat.mtime if stat is not None else _now_ms()
        self._written = (session, held)
        return int(mtime)


def _now_ms() -> int:
    return int(time.time() * 1000)
