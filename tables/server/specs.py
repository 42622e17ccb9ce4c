"""What a consumer is started from: the table config and the consuming segment's ZK metadata.

`consuming_spec` is the OFFLINE->CONSUMING transition's reading of them: the start offset from
`segment.realtime.startOffset` (a restarted server resumes there), the row threshold from the
segment's `segment.flush.threshold.size` (the controller's choice for this segment; 100,000 when
absent), the time threshold from the table's stream config, the creation time from the metadata
or, failing that, the LLC name, and pauseless mode from the table config as it is now.
`committed_end_offset` is the CONSUMING->ONLINE transition's: the end offset of the segment once
committed (DONE), which the consumer compares with its own (KEEP or DISCARD).
"""

from __future__ import annotations

import logging

from tables.cluster.context import ClusterContext
from tables.cluster.reads import ClusterReader
from tables.domain.flush import flush_threshold_time_ms
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.domain.table_config import TableConfig

from .consumer import ConsumingSegment

__all__ = ["DEFAULT_THRESHOLD_ROWS", "committed_end_offset", "consuming_spec"]

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD_ROWS = 100_000


def consuming_spec(
    table: str, segment: str, config: TableConfig, meta: SegmentZKMetadata
) -> ConsumingSegment:
    """The consumer's spec; ValueError for a segment that is not a consuming LLC segment."""
    name = LLCSegmentName.parse(segment)
    if name is None or meta.start_offset is None:
        raise ValueError(f"{segment} is not a consuming LLC segment")
    return ConsumingSegment(
        table=table,
        segment=segment,
        topic=config.topic_name or "",
        partition=name.partition_group_id,
        start_offset=int(meta.start_offset),
        threshold_rows=meta.flush_threshold_size or DEFAULT_THRESHOLD_ROWS,
        window_ms=flush_threshold_time_ms(config.stream_config),
        creation_ms=meta.creation_time or name.creation_time_ms,
        pauseless=config.pauseless_enabled,
    )


def committed_end_offset(ctx: ClusterContext, table: str, segment: str) -> int | None:
    """The segment's end offset when its ZK metadata says DONE, else None; None too when it
    cannot be read (the consumer then asks the controller)."""
    try:
        meta = ClusterReader(ctx).segment_metadata(table, segment)
        if meta.status == SegmentStatus.DONE and meta.end_offset is not None:
            return int(meta.end_offset)
    except Exception as exc:
        log.info("%s: committed end offset not read (%s): asking the controller", segment, exc)
    return None
