"""Gathers the inputs of the exactly-once ledger check (`tables.domain.ledger`) and runs it.

`verify_table(ctx, table, rows=..., key_field=..., lost=...)`:
- ranges: every segment's metadata is read from ZooKeeper; LLC names give the partition and the
  sequence number (other names are not part of the stream ledger and are noted);
- rows (only with `rows=True`), one partition at a time so that memory holds one partition:
  each DONE segment is downloaded from the deep store (`DeepStore.segment_key`) into a temporary
  directory and read back: its `__offset` column, its key column when the table's schema has
  `key_field`, the offsets the table's filter dropped (`FILTERED_OFFSETS_FILE`, which excuse
  exactly those offsets), and whether it unnests arrays (`UNNEST_FILE`: its rows are then counted
  per offset); a segment that is absent or unreadable is reported, not raised.
  The stream partition is read over the DONE segments' span `[min start, max end)` with the
  table's stream provider (never blocking), and each message's key is its JSON object's
  `key_field` (text as the producer partitions on it: strings as they are, other values as compact
  JSON; None when absent or not a JSON object).
- `lost` are the already counted stream losses: they excuse a gap (see the domain module); so do
  the skips a resume recorded in its new segments' metadata (`declared_skips`); the offsets a
  resume from smallest consumed again (`declared_replays`) excuse exactly those overlaps and
  duplicated rows. The offsets a consumer found gone from the stream mid-segment, which the
  committed segment declares in its `custom.map` (`consumption.lostOffsets`, see
  `declared_losses`), excuse exactly those offsets of that partition (a note each); a
  declaration that does not parse or is not inside its own segment's range excuses nothing and
  is a problem. Offsets of a DONE segment's range below the stream's first available offset that
  the segment holds no row at and nothing excuses cannot be verified any more: a note each run
  (`unverified_gaps`; Kafka's transaction markers take offsets, so would a loss nobody declared).

Raises NotFound for an unknown table; StreamError (no such topic or partition) and Redis errors
propagate for the caller to report.
Nothing is written anywhere.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tables.builds import deep_store
from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.cluster.reads import ClusterReader
from tables.domain import pause
from tables.domain.ledger import (
    FILTERED_OFFSETS_FILE,
    LOST_OFFSETS_KEY,
    UNNEST_FILE,
    LedgerReport,
    LostRange,
    SegmentRange,
    SegmentRows,
    StreamRows,
    check_ranges,
    check_rows,
    combine,
    offset_runs,
    parse_offset,
    parse_offset_ranges,
)
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.segments.deepstore import DeepStore
from tables.segments.frames import OFFSET_COLUMN
from tables.segments.parquet_read import read_parquet
from tables.segments.segment_format import DATA_FILE, read_segment_files
from tables.streams.base import StreamError, StreamProvider, provider_for
from tables.streams.producer import DEFAULT_KEY_FIELD

__all__ = [
    "declared_losses",
    "declared_replays",
    "declared_skips",
    "key_text",
    "read_stream_keys",
    "segment_ranges",
    "unverified_gaps",
    "verify_table",
]

FETCH_BATCH = 10_000


def key_text(value: Any) -> str | None:
    """A key as text: strings as they are, other JSON values as compact JSON; None stays None."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _message_key(value: bytes, key_field: str) -> str | None:
    try:
        row = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    return key_text(row.get(key_field)) if isinstance(row, dict) else None


def segment_ranges(
    manager: ClusterReader, table: str
) -> tuple[list[SegmentRange], dict[str, SegmentZKMetadata], list[str]]:
    """(the LLC segments' ranges, their metadata by name, the names that are not LLC names)."""
    ranges: list[SegmentRange] = []
    metadata: dict[str, SegmentZKMetadata] = {}
    others: list[str] = []
    for name in manager.segment_names(table):
        parsed = LLCSegmentName.parse(name)
        if parsed is None:
            others.append(name)
            continue
        try:
            found = manager.segment_metadata(table, name)
        except NotFound:  # deleted since the listing (retention): no longer part of the ledger
            continue
        metadata[name] = found
        ranges.append(
            SegmentRange(
                segment=name,
                partition=parsed.partition_group_id,
                sequence=parsed.sequence_number,
                status=str(found.status),
                start_offset=found.start_offset,
                end_offset=found.end_offset,
            )
        )
    return ranges, metadata, others


def read_stream_keys(
    provider: StreamProvider, partition: int, start: int, end: int, key_field: str
) -> StreamRows:
    """The key of every message the partition still holds in `[start, end)`."""
    try:
        latest = provider.latest_offset(partition)
        first_available = provider.earliest_offset(partition)
    except ValueError as exc:  # the topic has no such partition (any more)
        raise StreamError(str(exc)) from None
    keys: dict[int, str | None] = {}
    offset, stop = start, min(end, latest)
    while offset < stop:
        batch = provider.fetch(partition, offset, min(FETCH_BATCH, stop - offset), timeout_ms=0)
        first_available = max(first_available, batch.first_available_offset)
        for message in batch.messages:
            if message.offset < stop:
                keys[message.offset] = _message_key(message.value, key_field)
        if not batch.messages:
            break
        offset = batch.next_offset
    return StreamRows(keys=keys, first_available=first_available, latest=latest)


def _segment_rows(
    store: DeepStore,
    raw_table: str,
    found: SegmentRange,
    metadata: SegmentZKMetadata,
    key_column: str | None,
    work: Path,
) -> SegmentRows:
    start, end = parse_offset(found.start_offset), parse_offset(found.end_offset)
    assert start is not None and end is not None  # _done_by_partition kept only these
    base = SegmentRows(found.segment, start, end, total_docs=metadata.total_docs)
    key = store.segment_key(raw_table, found.segment)
    if not store.exists(key):
        return _with_error(base, f"not in the deep store at {store.uri_for(key)}")
    local = work / f"{found.segment}.tar.gz"
    try:
        store.download(key, local)
        files = read_segment_files(local)
        if DATA_FILE not in files:
            raise ValueError(f"no {DATA_FILE} in the segment")
        table = read_parquet(files[DATA_FILE])
        declared = files.get(FILTERED_OFFSETS_FILE, b"").decode("ascii")
        filtered = [o for a, b in parse_offset_ranges(declared) for o in range(a, b)]
        unnested = UNNEST_FILE in files
    except (OSError, ValueError, EOFError, tarfile.TarError) as exc:  # pyarrow's are OSError/Value
        return _with_error(base, f"{type(exc).__name__}: {exc}")
    finally:
        local.unlink(missing_ok=True)
    if OFFSET_COLUMN not in table.column_names:
        return _with_error(base, f"it has no {OFFSET_COLUMN} column")
    offsets = [int(o) for o in table.column(OFFSET_COLUMN).to_pylist() if o is not None]
    keys = None
    if key_column is not None and key_column in table.column_names:
        keys = [key_text(v) for v in table.column(key_column).to_pylist()]
    return SegmentRows(
        found.segment,
        start,
        end,
        offsets,
        keys,
        metadata.total_docs,
        filtered=filtered,
        unnested=unnested,
    )


def _with_error(rows: SegmentRows, error: str) -> SegmentRows:
    return SegmentRows(rows.segment, rows.start_offset, rows.end_offset, error=error)


def _done_by_partition(ranges: Iterable[SegmentRange]) -> dict[int, list[SegmentRange]]:
    """DONE segments whose offsets the range check could read, by partition."""
    out: dict[int, list[SegmentRange]] = defaultdict(list)
    for found in ranges:
        if found.status != SegmentStatus.DONE:
            continue
        start, end = parse_offset(found.start_offset), parse_offset(found.end_offset)
        if start is not None and end is not None and start <= end:
            out[found.partition].append(found)
    return out


def declared_replays(
    ranges: Iterable[SegmentRange], metadata: dict[str, SegmentZKMetadata]
) -> list[LostRange]:
    """The committed offsets a resume from smallest consumed again: `[its start, where
    consumption had stopped)`, as the new segment's `custom.map` records them."""
    found = []
    for segment in ranges:
        meta = metadata.get(segment.segment)
        custom = meta.custom_map if meta is not None else {}
        start = parse_offset(segment.start_offset)
        previous = parse_offset(custom.get(pause.PREVIOUS_OFFSET))
        smallest = custom.get(pause.START_REASON) == pause.SkipReason.SMALLEST
        if smallest and start is not None and previous is not None and start < previous:
            why = "were consumed again by a resume from smallest"
            found.append(LostRange(segment.partition, start, previous, why))
    return found


def declared_skips(
    ranges: Iterable[SegmentRange], metadata: dict[str, SegmentZKMetadata]
) -> list[LostRange]:
    """The offsets a resume jumped over, as its new segment's `custom.map` records them
    (`tables.domain.pause`): lost by the stream, or skipped on purpose (`consumeFrom=largest`)."""
    found = []
    for segment in ranges:
        meta = metadata.get(segment.segment)
        custom = meta.custom_map if meta is not None else {}
        reason = custom.get(pause.START_REASON)
        start = parse_offset(segment.start_offset)
        skipped_from = parse_offset(custom.get(pause.PREVIOUS_OFFSET))
        if start is None or skipped_from is None or skipped_from >= start:
            continue
        if reason == pause.SkipReason.LARGEST:
            why = "were skipped by a resume from largest"
        elif reason == pause.SkipReason.DATA_LOSS:
            why = "were dropped by the stream before they were read (counted data loss)"
        else:
            continue
        found.append(LostRange(segment.partition, skipped_from, start, why))
    return found


def declared_losses(
    ranges: Iterable[SegmentRange], metadata: dict[str, SegmentZKMetadata]
) -> tuple[list[LostRange], list[str]]:
    """The offsets each segment declares lost mid-consumption (`consumption.lostOffsets` in its
    `custom.map`, written at commit), and a problem line for each declaration that does not
    parse or does not lie inside its own segment's `[start, end)` (those excuse nothing)."""
    found: list[LostRange] = []
    problems: list[str] = []
    why = "were gone from the stream when the segment was consumed (declared data loss)"
    for segment in ranges:
        meta = metadata.get(segment.segment)
        text = (meta.custom_map if meta is not None else {}).get(LOST_OFFSETS_KEY)
        if not text:
            continue
        where = f"partition {segment.partition}: {segment.segment}"
        try:
            declared = parse_offset_ranges(text)
        except ValueError as exc:
            problems.append(f"{where} declares lost offsets {text!r} that do not parse: {exc}")
            continue
        start, end = parse_offset(segment.start_offset), parse_offset(segment.end_offset)
        if start is None or end is None or not all(start <= a and b <= end for a, b in declared):
            problems.append(
                f"{where} declares lost offsets {text!r} outside its range "
                f"[{segment.start_offset}, {segment.end_offset}): not excused"
            )
            continue
        found.extend(LostRange(segment.partition, a, b, why) for a, b in declared)
    return found, problems


def unverified_gaps(
    partition: int,
    segments: Iterable[SegmentRows],
    stream: StreamRows,
    excused: Iterable[LostRange],
) -> list[str]:
    """A note per run of offsets of a readable segment's `[start, end)`, below the stream's first
    available offset, that the segment holds no row at and no loss of `partition` excuses: once
    the stream dropped them nothing tells a row that should be there from an offset that never
    held one (a transaction marker)."""
    spans = [(loss.start, loss.end) for loss in excused if loss.partition == partition]
    notes = []
    for seg in segments:
        stop = min(seg.end_offset, stream.first_available)
        if seg.error is not None or seg.start_offset >= stop:
            continue
        held = set(seg.offsets) | set(seg.filtered)
        gaps = [
            o
            for o in range(seg.start_offset, stop)
            if o not in held and not any(a <= o < b for a, b in spans)
        ]
        for first, last in offset_runs(gaps):
            notes.append(
                f"partition {partition}: segment {seg.segment} holds no row at offsets "
                f"[{first}, {last}), which the stream no longer holds (it starts at "
                f"{stream.first_available}) and no loss excuses: not verified"
            )
    return notes


def verify_table(
    ctx: ClusterContext,
    table: str,
    *,
    rows: bool = False,
    key_field: str = DEFAULT_KEY_FIELD,
    lost: Iterable[LostRange] = (),
    store: DeepStore | None = None,
) -> LedgerReport:
    """Check `table`'s ledger (see the module docstring)."""
    manager = ClusterReader(ctx)
    config = manager.get_table_config(table)
    ranges, metadata, others = segment_ranges(manager, table)
    lost = list(lost) + declared_skips(ranges, metadata)
    # Mid-segment losses lie inside their segment: they excuse rows, never a gap between segments.
    losses, bad_declarations = declared_losses(ranges, metadata)
    replayed = declared_replays(ranges, metadata)
    report = check_ranges(ranges, lost, replayed)
    report.problems.extend(bad_declarations)
    report.notes.extend(
        f"partition {loss.partition}: offsets [{loss.start}, {loss.end}) {loss.why}: excused"
        for loss in losses
    )
    report.notes.extend(f"{name}: not an LLC segment name, not in the ledger" for name in others)
    if not rows:
        return report
    store = store or deep_store()
    schema = manager.get_schema(config.schema_name)
    key_column = key_field if schema.field(key_field) is not None else None
    provider = provider_for(config.stream_config, ctx.redis_url)
    row_reports: list[LedgerReport] = []
    try:
        with tempfile.TemporaryDirectory(prefix="verify-ledger-") as work:
            for partition, done in sorted(_done_by_partition(ranges).items()):
                segments = [
                    _segment_rows(
                        store,
                        config.raw_table_name,
                        found,
                        metadata[found.segment],
                        key_column,
                        Path(work),
                    )
                    for found in done
                ]
                span_start = min(s.start_offset for s in segments)
                span_end = max(s.end_offset for s in segments)
                stream = read_stream_keys(provider, partition, span_start, span_end, key_field)
                excused = [*lost, *losses]
                row_report = check_rows(partition, segments, stream, excused, replayed)
                row_report.notes.extend(unverified_gaps(partition, segments, stream, excused))
                row_reports.append(row_report)
    finally:
        provider.close()
    return combine(report, row_reports)
