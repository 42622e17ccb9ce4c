"""A segment's `data.parquet`, written by pyarrow so that the same rows always give the same bytes.

Contract:
- `arrow_schema(schema)`: the file's columns, the schema's in order then `__offset` (int64), all
  nullable: INT int32, LONG int64, FLOAT float32, DOUBLE float64, BOOLEAN bool, TIMESTAMP
  timestamp[us, tz=UTC], BYTES binary, BIG_DECIMAL decimal128(38, 18), everything else string; a
  multi-value column is a list of its type. No schema metadata is stored.
- `DataFileWriter(path, schema)` takes the rows in order, in Arrow tables or record batches of any
  size (cast to `arrow_schema`), and writes row groups of exactly `ROW_GROUP_ROWS` rows (the last
  one shorter), each from one contiguous table: the file's bytes depend only on the rows, their
  order and the pyarrow version, never on how the rows were chunked on the way (collected from
  Spark at once, or streamed from an intermediate file). Snappy, dictionary encoding and
  statistics as pyarrow's defaults; no rows: a file with the schema and no row group. The file is
  written beside `path` and renamed into place on `close`; with `path` None it is written in
  memory instead (the same bytes), `data` once closed.
Spark's own Parquet writer is not used for segments: it lists column encodings in an order that
changes from one JVM to the next, so the same rows written by two processes differed.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq

from tables.domain.schema import FieldSpec, Schema

__all__ = ["OFFSET_COLUMN", "ROW_GROUP_ROWS", "DataFileWriter", "arrow_schema", "arrow_type"]

OFFSET_COLUMN = "__offset"
ROW_GROUP_ROWS = 65_536
_SCALARS: dict[str, pa.DataType] = {
    "INT": pa.int32(),
    "LONG": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "BYTES": pa.binary(),
    "BIG_DECIMAL": pa.decimal128(38, 18),
}


def arrow_type(spec: FieldSpec) -> pa.DataType:
    scalar = _SCALARS.get(spec.data_type, pa.string())
    return scalar if spec.single_value else pa.list_(pa.field("element", scalar))


def arrow_schema(schema: Schema) -> pa.Schema:
    fields = [pa.field(spec.name, arrow_type(spec)) for spec in schema.fields]
    return pa.schema([*fields, pa.field(OFFSET_COLUMN, pa.int64())])


class DataFileWriter:
    def __init__(self, path: Path | None, schema: pa.Schema) -> None:
        self.path = None if path is None else Path(path)
        self.schema = schema
        self.rows = 0
        self.data: bytes | None = None  # the file's bytes, written in memory (`path` None)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._buffer: pa.BufferOutputStream | None = None
        self._temporary: Path | None = None
        if self.path is None:
            self._buffer = sink = pa.BufferOutputStream()
        else:
            self._temporary = sink = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}")
        self._writer = pq.ParquetWriter(sink, schema, compression="snappy", store_schema=False)

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        """Append rows (their columns by name; extra columns are ignored)."""
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        table = table.select(self.schema.names).cast(self.schema)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        while self._pending_rows >= ROW_GROUP_ROWS:
            self._flush(ROW_GROUP_ROWS)

    def _flush(self, count: int) -> None:
        pending = pa.concat_tables(self._pending)
        group, rest = pending.slice(0, count), pending.slice(count)
        self._writer.write_table(group.combine_chunks(), row_group_size=ROW_GROUP_ROWS)
        self.rows += group.num_rows
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def close(self) -> Path | None:
        if self._pending_rows:
            self._flush(self._pending_rows)
        self._writer.close()
        if self._buffer is not None:
            self.data = self._buffer.getvalue().to_pybytes()
        elif self._temporary is not None and self.path is not None:
            self._temporary.replace(self.path)
        return self.path

    def abort(self) -> None:
        self._writer.close()
        if self._temporary is not None:
            self._temporary.unlink(missing_ok=True)

    def __enter__(self) -> DataFileWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()
