"""The metadata of a server's new consuming segments, read as soon as the IdealState names them.

At a commit the next segment's consumer waits for its metadata (start offset, flush threshold):
the IdealState watch fires on ZooKeeper's event thread, the reconcile thread then hands the
OFFLINE -> CONSUMING transition to a transition thread, which read the metadata: one round trip
after two thread hand-offs, on the path of the partition's freshness. Here the watch itself sends
the read (asynchronously, nothing waits), so the answer is usually in by the time the transition
asks for it.

Contract:
- `saw(table, record)` (the IdealState watch, any thread): for every segment that `record` puts
  CONSUMING on this instance and that `is_new(table, segment)` calls new (no replica yet), one
  asynchronous read of its metadata is sent, unless one is pending already. Never raises, never
  blocks on ZooKeeper.
- `take(table, segment)`: the segment's `SegmentZKMetadata` from that read, once (the entry is
  removed), or None: none sent, sent more than `FRESH_S` ago (a later transition reads afresh),
  or the read failed or found no znode (the caller reads itself and reports as it always did).
  It waits for a pending answer at most `WAIT_S`.
- The read is sent after the IdealState change that made the segment CONSUMING here, and commit
  writes the next segment's metadata before that change (step 2 before step 3), so the answer
  is what a read in the transition would have returned.
- Stores without asynchronous reads (the in-memory store of unit tests) prefetch nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tables.cluster.context import ClusterContext
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.znrecord import ZNRecord
from tables.zk import codec

__all__ = ["MetadataPrefetch"]

log = logging.getLogger(__name__)

FRESH_S = 2.0
WAIT_S = 5.0
CONSUMING = "CONSUMING"


class MetadataPrefetch:
    def __init__(
        self,
        instance_id: str,
        ctx: Callable[[], ClusterContext],
        is_new: Callable[[str, str], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.instance_id = instance_id
        self.ctx = ctx
        self.is_new = is_new
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], tuple[float, Any]] = {}

    def saw(self, table: str, record: ZNRecord | None) -> None:
        if record is None:
            return
        try:
            ctx = self.ctx()
            get_async = getattr(ctx.client, "get_async", None)
            if get_async is None:
                return
            now = self.clock()
            with self._lock:
                self._drop_old(now)
                for segment, states in record.map_fields.items():
                    key = (table, segment)
                    if states.get(self.instance_id) != CONSUMING or key in self._pending:
                        continue
                    if self.is_new(table, segment):
                        self._pending[key] = (now, get_async(ctx.paths.segment(table, segment)))
        except Exception:  # a prefetch must never break the watch
            log.debug("%s: metadata prefetch of %s failed", self.instance_id, table, exc_info=True)

    def take(self, table: str, segment: str) -> SegmentZKMetadata | None:
        with self._lock:
            found = self._pending.pop((table, segment), None)
        if found is None or self.clock() - found[0] > FRESH_S:
            return None
        try:
            data, _stat = found[1].get(timeout=WAIT_S)
            return SegmentZKMetadata.from_znrecord(codec.decode(data))
        except Exception:  # the caller reads again, and reports what it finds
            return None

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _drop_old(self, now: float) -> None:
        for key in [k for k, (sent, _) in self._pending.items() if now - sent > FRESH_S]:
            del self._pending[key]
