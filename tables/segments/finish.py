"""One segment from the sorted rows Spark produced: data file, statistics, checks, metadata, tar.

`finish(request, plan, output, index, work_dir, batch_size)` takes the rows of `index` from a
`tables.segments.batch.GroupOutput` (a table in memory, or an intermediate file streamed in
batches) and:
- writes the data file with `tables.segments.data_file.DataFileWriter` (the same bytes whichever
  way the rows came), noting the time range (the rows' time keys, Spark's) on the way: in memory
  when the rows are (collected from Spark), else `<work_dir>/<segment>/data.parquet`, so that a
  batch of small segments makes one file each, the tar, on a disk the rest of the host keeps
  syncing;
- computes the statistics (`tables.segments.arrow_stats`: from the table in memory, in a thread
  while the file is written when it is large, or from the written file one column at a time)
  and refuses repeated offsets or offsets outside the request's range (`BuildError`);
- makes `metadata.properties` and `creation.meta` and packs `<work_dir>/<segment>.tar.gz`
  (`tables.segments.segment_format`: `pack_files` from memory, `pack_segment` from the folder, the
  same bytes); when `ingestionConfig.filterConfig` dropped rows, the
  segment also holds `FILTERED_OFFSETS_FILE` (their offsets as "s-e,s-e" ranges, the ledger's
  format) and `BuildResult.filtered_rows` counts them; their offsets must be distinct, inside
  the request's range, and no more than the offsets its rows leave (`BuildError`).
- with `complexTypeConfig.fieldsToUnnest` (`GroupPlan.unnest`) an offset may hold several rows:
  the segment declares it with `UNNEST_FILE` (the fields, one a line); repeated offsets are then
  allowed, but not two rows with the same offset and element positions (a repeated input);
  `total_docs` counts rows (Pinot's), `filtered_rows` the rows the filter dropped and
  `FILTERED_OFFSETS_FILE` only the offsets it left without any row.
Pure pyarrow and the standard library: it runs in the driver.
"""

from __future__ import annotations

import logging
import shutil
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tables.domain.ledger import (
    FILTERED_OFFSETS_FILE,
    UNNEST_FILE,
    format_offset_ranges,
    offset_runs,
)
from tables.segments import arrow_stats, frames
from tables.segments.batch import TIME_KEY, GroupOutput, GroupPlan
from tables.segments.data_file import ROW_GROUP_ROWS, DataFileWriter, arrow_schema
from tables.segments.errors import BuildError
from tables.segments.parquet_read import read_parquet
from tables.segments.segment_format import (
    CREATION_META,
    DATA_FILE,
    METADATA_FILE,
    format_properties,
    format_value,
    pack_creation_meta,
    pack_files,
    pack_segment,
)

__all__ = ["INDEX_VERSION", "BuildRequest", "BuildResult", "finish"]

log = logging.getLogger(__name__)

#: `segment.index.version`: this project's segment format (one Parquet file), not Pinot's v1/v3.
INDEX_VERSION = "parquet-v1"
_STATS_THREADS = 4
#: Below this many rows the statistics are computed after the file is written, one column after
#: the other, without threads: starting them cost more than they save (a pause's small segments).
_STATS_THREAD_ROWS = 20_000


@dataclass(frozen=True)
class BuildRequest:
    table_name: str  # raw, without _REALTIME
    segment_name: str
    schema: dict[str, Any]  # Pinot schema JSON
    table_config: dict[str, Any]  # REST form
    start_offset: int
    end_offset: int  # exclusive
    creation_time_ms: int


@dataclass(frozen=True)
class BuildResult:
    segment_name: str
    tar_path: Path
    total_docs: int
    incomplete_rows: int
    incomplete_by_column: dict[str, int]
    problems: list[str]
    size_bytes: int
    crc: int
    data_crc: int  # the same value as crc: both are crc32 of data.parquet
    start_time_ms: int
    end_time_ms: int
    metadata: dict[str, str] = field(repr=False)
    min_offset: int | None
    max_offset: int | None
    # Wall seconds per phase: spark (the group's shared Spark job: decode, transform, sort),
    # problems (the extra job, when some row has a problem), write_and_stats (this segment's data
    # file and statistics, side by side), pack (CRC, metadata, tar); batch_size: the segments
    # built together.
    phase_seconds: dict[str, float] = field(default_factory=dict)
    filtered_rows: int = 0  # dropped by ingestionConfig.filterConfig (Pinot: realtimeRowsFiltered)


def _raw_table(name: str) -> str:
    for suffix in ("_REALTIME", "_OFFLINE"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _crc32(path: Path) -> int:
    crc = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _metadata(
    request: BuildRequest,
    plan: GroupPlan,
    stats: arrow_stats.FileStats,
    start_ms: int,
    end_ms: int,
) -> dict[str, str]:
    props = {
        "segment.name": request.segment_name,
        "segment.table.name": _raw_table(request.table_name),
        "segment.total.docs": str(stats.total_docs),
        "segment.start.time": str(start_ms),
        "segment.end.time": str(end_ms),
        "segment.time.unit": "MILLISECONDS",
        "segment.realtime.startOffset": str(request.start_offset),
        "segment.realtime.endOffset": str(request.end_offset),
        "segment.creation.time": str(request.creation_time_ms),
        "segment.index.version": INDEX_VERSION,
    }
    if plan.time_spec is not None:
        props["segment.time.column.name"] = plan.time_spec.name
    for spec in plan.schema.fields:
        column = stats.columns[spec.name]
        prefix = f"column.{spec.name}."
        props[prefix + "dataType"] = spec.data_type
        props[prefix + "columnType"] = spec.kind.value
        props[prefix + "cardinality"] = str(column.cardinality)
        props[prefix + "totalDocs"] = str(column.total_docs)
        props[prefix + "isSingleValues"] = "true" if column.single_value else "false"
        props[prefix + "hasNullValue"] = "true" if column.has_null else "false"
        if column.min_value is not None:
            props[prefix + "minValue"] = format_value(column.min_value)
        if column.max_value is not None:
            props[prefix + "maxValue"] = format_value(column.max_value)
    return props


def _chunks(output: GroupOutput, index: int) -> Iterator[pa.Table | pa.RecordBatch]:
    if index in output.tables:
        yield output.tables[index]
    elif index in output.files:
        handle = pq.ParquetFile(output.files[index])
        yield from handle.iter_batches(batch_size=ROW_GROUP_ROWS)


def _write_data(
    output: GroupOutput, index: int, writer: DataFileWriter
) -> tuple[int | None, int | None]:
    """Write the data file (closing `writer`); the (min, max) time key of its rows."""
    low = high = None
    with writer:
        for chunk in _chunks(output, index):
            writer.write(chunk)
            times = chunk.column(TIME_KEY)
            if times.null_count < len(times):
                bounds = pc.min_max(times)
                lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
                low = lo if low is None else min(low, lo)
                high = hi if high is None else max(high, hi)
    return low, high


def _repeats(output: GroupOutput, index: int) -> bool:
    """Whether two unnested rows have the same offset and element positions: their input
    repeated an offset."""
    keys = [frames.OFFSET_COLUMN, frames.UNNEST_KEY]
    if index in output.tables and frames.UNNEST_KEY in output.tables[index].column_names:
        rows = output.tables[index].select(keys)
    elif index in output.files and frames.UNNEST_KEY in pq.read_schema(output.files[index]).names:
        rows = read_parquet(output.files[index], columns=keys)
    else:
        return False
    return rows.group_by(keys).aggregate([]).num_rows != rows.num_rows


def _declare_filtered(request: BuildRequest, offsets: list[int], held_offsets: int) -> bytes:
    """The offsets the filter dropped (ascending) as ranges; BuildError when they are not
    distinct offsets of the request's range."""
    name = request.segment_name
    if len(set(offsets)) != len(offsets) or not (
        request.start_offset <= offsets[0] and offsets[-1] < request.end_offset
    ):
        raise BuildError(f"{name}: the offsets the filter dropped repeat or leave the range")
    if len(offsets) + held_offsets > request.end_offset - request.start_offset:
        raise BuildError(f"{name}: more rows and dropped rows than offsets")
    return format_offset_ranges(offset_runs(offsets)).encode("ascii")


class _SegmentFiles:
    """A segment's files before packing: in a folder (rows streamed from an intermediate file,
    possibly large), or in memory (rows Spark collected: no file is made but the tar)."""

    def __init__(self, work_dir: Path, name: str, in_memory: bool) -> None:
        self.name, self.folder = name, work_dir / name
        self.files: dict[str, bytes] | None = {} if in_memory else None
        if self.files is None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder.mkdir(parents=True)

    def data_writer(self, schema: pa.Schema) -> DataFileWriter:
        return DataFileWriter(None if self.files is not None else self.folder / DATA_FILE, schema)

    def data_crc(self, writer: DataFileWriter) -> int:
        if self.files is not None and writer.data is not None:
            self.files[DATA_FILE] = writer.data
            return zlib.crc32(writer.data)
        return _crc32(self.folder / DATA_FILE)

    def put(self, file: str, data: bytes) -> None:
        if self.files is not None:
            self.files[file] = data
        else:
            (self.folder / file).write_bytes(data)

    def pack(self, tar_path: Path, mtime: int) -> int:
        if self.files is not None:
            return pack_files(self.name, self.files, tar_path, mtime=mtime)
        return pack_segment(self.folder, tar_path, mtime=mtime)


def finish(
    request: BuildRequest,
    plan: GroupPlan,
    output: GroupOutput,
    index: int,
    work_dir: Path,
    batch_size: int,
) -> BuildResult:
    """One segment from its rows (see the module docstring)."""
    name = request.segment_name
    files = _SegmentFiles(work_dir, name, in_memory=index in output.tables)
    phases = dict(output.seconds)
    mark = time.monotonic()
    schema = arrow_schema(plan.schema)
    writer = files.data_writer(schema)
    if index in output.tables and output.tables[index].num_rows < _STATS_THREAD_ROWS:
        rows = output.tables[index].select(schema.names).cast(schema)
        time_range = _write_data(output, index, writer)
        stats = arrow_stats.stats_of(rows.column, rows.num_rows, plan.schema)
    elif index in output.tables:  # rows in memory: statistics while the file is written
        rows = output.tables[index].select(schema.names).cast(schema)
        with ThreadPoolExecutor(max_workers=1) as pool:
            counting = pool.submit(
                arrow_stats.stats_of, rows.column, rows.num_rows, plan.schema, _STATS_THREADS
            )
            time_range = _write_data(output, index, writer)
            stats = counting.result()
    else:
        time_range = _write_data(output, index, writer)
        stats = arrow_stats.file_stats(files.folder / DATA_FILE, plan.schema)
    phases["write_and_stats"] = round(time.monotonic() - mark, 3)
    mark = time.monotonic()
    repeated = stats.distinct_offsets != stats.total_docs and not plan.unnest
    if repeated or _repeats(output, index):
        raise BuildError(f"{name}: the input repeats offsets (every offset must appear once)")
    if stats.total_docs and not (
        request.start_offset <= stats.min_offset and stats.max_offset < request.end_offset
    ):
        raise BuildError(
            f"{name}: input offsets {stats.min_offset}..{stats.max_offset} are outside "
            f"[{request.start_offset}, {request.end_offset})"
        )
    # Pinot: a segment without any time value spans its creation instant.
    start_ms, end_ms = (
        request.creation_time_ms if value is None else int(value) for value in time_range
    )
    filtered = output.filtered.get(index, [])
    if filtered:
        files.put(
            FILTERED_OFFSETS_FILE, _declare_filtered(request, filtered, stats.distinct_offsets)
        )
    if plan.unnest:  # several rows per offset are this segment's own (see the ledger)
        files.put(UNNEST_FILE, "".join(f + "\n" for f in plan.unnest).encode("utf-8"))
    incomplete = output.incomplete.get(index, frames.Incomplete(0, {}, []))
    crc = files.data_crc(writer)
    metadata = _metadata(request, plan, stats, start_ms, end_ms)
    files.put(METADATA_FILE, format_properties(metadata).encode("ascii"))
    files.put(CREATION_META, pack_creation_meta(crc, request.creation_time_ms))
    tar_path = work_dir / f"{name}.tar.gz"
    size = files.pack(tar_path, mtime=request.creation_time_ms // 1000)
    phases["pack"] = round(time.monotonic() - mark, 3)
    phases["batch_size"] = batch_size
    log.info(
        "built %s: %d docs (%d incomplete), %d bytes, crc %d",
        name,
        stats.total_docs,
        incomplete.rows,
        size,
        crc,
    )
    return BuildResult(
        segment_name=name,
        tar_path=tar_path,
        total_docs=stats.total_docs,
        incomplete_rows=incomplete.rows,
        incomplete_by_column=incomplete.by_column,
        problems=incomplete.problems,
        size_bytes=size,
        crc=crc,
        data_crc=crc,
        start_time_ms=start_ms,
        end_time_ms=end_ms,
        metadata=metadata,
        min_offset=stats.min_offset,
        max_offset=stats.max_offset,
        phase_seconds=phases,
        filtered_rows=output.filtered_rows.get(index, len(filtered)),
    )
