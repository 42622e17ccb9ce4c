"""Staging files: the rows a server hands over for a segment build.

A staging file is one Parquet file written by pyarrow with two columns, `offset` (int64) and
`value` (binary: the raw message bytes), one row per consumed message, in the order given.
`write_staging` writes it atomically: to `<name>.tmp-<uuid>` beside the target, then renamed into
place, so a reader never sees half a file. `spark_readable` gives Spark a path it can read: local
paths and `file://` URIs as they are, anything else (`s3://...`) copied into the work directory
through fsspec first; `local_path` turns a plain path or a `file:` URI into a file-system path.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["STAGING_SCHEMA", "local_path", "spark_readable", "write_staging"]

STAGING_SCHEMA = pa.schema([("offset", pa.int64()), ("value", pa.binary())])
_BATCH = 10_000


def local_path(path: str | Path) -> Path:
    """The file-system path of a plain path or a `file:` URI."""
    text = str(path)
    return Path(unquote(urlparse(text).path)) if text.startswith("file:") else Path(path)


def write_staging(pairs: Iterable[tuple[int, bytes]], path: str | Path) -> int:
    """Write `(offset, value)` pairs to one Parquet file at `path` atomically; returns the rows."""
    target = local_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f"{target.name}.tmp-{uuid.uuid4().hex}")
    rows = 0
    offsets: list[int] = []
    values: list[bytes] = []
    try:
        with pq.ParquetWriter(temporary, STAGING_SCHEMA, compression="snappy") as writer:

            def flush() -> None:
                batch = pa.table(
                    [pa.array(offsets, pa.int64()), pa.array(values, pa.binary())],
                    schema=STAGING_SCHEMA,
                )
                writer.write_table(batch)
                offsets.clear()
                values.clear()

            for offset, value in pairs:
                offsets.append(int(offset))
                values.append(bytes(value))
                rows += 1
                if len(offsets) >= _BATCH:
                    flush()
            if offsets or rows == 0:
                flush()
        temporary.replace(target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return rows


def spark_readable(staging_uri: str, work_dir: Path) -> str:
    """A path or URI Spark can read for `staging_uri` (see the module docstring)."""
    scheme = urlparse(staging_uri).scheme.lower()
    if scheme in ("", "file"):
        return staging_uri
    import fsspec  # only for stores Spark may not reach by itself

    local = Path(work_dir) / f"staging-{uuid.uuid4().hex}.parquet"
    with fsspec.open(staging_uri, "rb") as src, local.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return str(local)
