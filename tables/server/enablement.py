"""A server's side of Helix's HELIX_ENABLED: disabled tables and a disabled instance.

Contract:
- `InstanceEnablement` follows this instance's `CONFIGS/PARTICIPANT/<id>` `HELIX_ENABLED` with a
  data watch (armed once the server registers; the first value is read at once). A change wakes
  the reconcile thread. An unreadable config keeps the last value; a missing one is enabled.
- `targets(ideal, targets)` is what the reconcile round aims for (`tables.domain.helix_enabled`):
  the IdealState's states while both the table (its IdealState's `HELIX_ENABLED`) and the instance
  are enabled, else OFFLINE for every segment the IdealState assigns here. The usual transitions
  then run: a CONSUMING replica stops without committing (CONSUMING -> OFFLINE, no
  segmentStoppedConsuming), an ONLINE one is unloaded (ONLINE -> OFFLINE; its local copy stays),
  CURRENTSTATES say OFFLINE, so the ExternalView shows OFFLINE. Once enabled again the replicas
  follow the IdealState: CONSUMING restarts from the segment's ZK start offset, ONLINE reloads.
  Segments the IdealState drops are still dropped while disabled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tables.cluster.context import ClusterContext
from tables.domain.helix_enabled import effective_targets, is_enabled
from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.watches import watch_data

__all__ = ["InstanceEnablement"]

log = logging.getLogger(__name__)


class InstanceEnablement:
    def __init__(self, instance_id: str, wake: Callable[[], None]) -> None:
        self.instance_id = instance_id
        self.enabled = True
        self._wake = wake
        self._watch: Any = None
        self._stopped = threading.Event()

    def watch(self, ctx: ClusterContext) -> None:
        """Arm the watch on this instance's config (once; it re-arms itself after reconnects)."""
        if self._watch is None:
            path = ctx.paths.participant_config(self.instance_id)
            self._watch = watch_data(ctx.client, path, self._on_config)

    def stop(self) -> None:
        self._stopped.set()

    def _on_config(self, data: bytes | None, _stat: object) -> bool:
        if self._stopped.is_set():
            return False
        try:
            record = codec.decode(data) if data else None
        except Exception:  # a watcher must survive a bad znode
            log.exception("%s: unreadable instance config; keeping the last", self.instance_id)
            return True
        enabled = is_enabled(record)
        if enabled != self.enabled:
            self.enabled = enabled
            log.info(
                "%s is %s: its replicas %s",
                self.instance_id,
                "enabled" if enabled else "disabled",
                "follow the IdealStates again" if enabled else "go OFFLINE",
            )
            self._wake()
        return True

    def targets(self, ideal: ZNRecord | None, targets: Mapping[str, str]) -> dict[str, str]:
        """This server's targets once the table's and the instance's HELIX_ENABLED apply."""
        return effective_targets(
            targets, table_enabled=is_enabled(ideal), instance_enabled=self.enabled
        )
