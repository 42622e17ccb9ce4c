"""The hand-off between a pauseless committer and the next segment's consumer on one server.

A pauseless commit start flips the IdealState (the committing segment ONLINE, the next one
CONSUMING) before it answers COMMIT_CONTINUE; this server then starts the next segment's consumer
on its reconcile thread while the committer stages the rows and submits the Spark build. Both run
in this process and compete for its interpreter, and every millisecond the start loses is a
millisecond of the partition's rows unconsumed: the freshness gap pauseless consumption exists to
close. So the committer lets the start go first (`bench/freshness.py`, 46-48 commits per run: the
committer's own start of N+1 after the COMMIT answer went from a median of 33.5 ms and a maximum
of 197 ms, where the other replica took 27.5 and 73 ms, to a median of 27 ms and a maximum of
90-104 ms, as fast as the other replica):

- `ConsumerStarts.started(table, segment, fetched)` records that this server started consuming
  `segment` (called by the instance right after the consumer's thread started); `fetched` (an
  event, optional) is set once that consumer's first fetch returned.
- `ConsumerStarts.wait_after(table, segment, timeout_s)` returns True as soon as this server
  consumes a later segment of `segment`'s partition (a higher sequence number), or False after
  `timeout_s`: when this server is not a replica of the next segment, or the partition ended, the
  build is only late by that much (`HANDOFF_WAIT_S`, a fraction of any build). After a start it
  also waits for that consumer's first fetch, at most `FIRST_FETCH_WAIT_S`: the rows waiting for
  it are the gap's end, and staging the committed rows (the committer's next step) holds the
  interpreter for milliseconds; a stream with nothing to read keeps the fetch blocked (outside
  the interpreter), which costs the build at most that long.
Names that are not LLC segment names never match. Only the highest sequence started per table and
partition is kept, so memory stays one entry per partition.
"""

from __future__ import annotations

import threading

from tables.domain.names import LLCSegmentName

__all__ = ["FIRST_FETCH_WAIT_S", "HANDOFF_WAIT_S", "ConsumerStarts"]

HANDOFF_WAIT_S = 0.5
FIRST_FETCH_WAIT_S = 0.1


class ConsumerStarts:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        # (table, partition) -> (sequence, its consumer's first-fetch event or None)
        self._highest: dict[tuple[str, int], tuple[int, threading.Event | None]] = {}

    def started(self, table: str, segment: str, fetched: threading.Event | None = None) -> None:
        name = LLCSegmentName.parse(segment)
        if name is None:
            return
        key = (table, name.partition_group_id)
        with self._changed:
            if name.sequence_number > self._highest.get(key, (-1, None))[0]:
                self._highest[key] = (name.sequence_number, fetched)
                self._changed.notify_all()

    def wait_after(self, table: str, segment: str, timeout_s: float = HANDOFF_WAIT_S) -> bool:
        name = LLCSegmentName.parse(segment)
        if name is None:
            return False
        key = (table, name.partition_group_id)
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._highest.get(key, (-1, None))[0] > name.sequence_number, timeout_s
            ):
                return False
            fetched = self._highest[key][1]
        if fetched is not None:
            fetched.wait(FIRST_FETCH_WAIT_S)
        return True
