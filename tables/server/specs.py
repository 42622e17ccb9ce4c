"""What a consumer is started from: the table config and the consuming segment's ZK metadata.

`consuming_spec` is the OFFLINE->CONSUMING transition's reading of them: the start offset from
`segment.realtime.startOffset` (a restarted server resumes there), the row threshold from the
segment's `segment.flush.threshold.size` (the controller's choice for this segment; 100,000 when
absent), the time threshold from the table's stream config, the creation time from the metadata
or, failing that, the LLC name, and pauseless mode from the table config as it is now.
"""

from __future__ import annotations

from tables.domain.flush import flush_threshold_time_ms
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import TableConfig

from .consumer import ConsumingSegment

__all__ = ["DEFAULT_THRESHOLD_ROWS", "consuming_spec"]

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
