"""`read_parquet` reads without pyarrow's dataset scanner, whose native threads can abort the
process at exit (tables.segments.parquet_read)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tables.segments.parquet_read import read_parquet

ROOT = Path(__file__).resolve().parents[3]

# Reads through each form read_parquet takes, then says whether pyarrow's dataset module was loaded.
PROBE = """
import io, sys
import pyarrow as pa, pyarrow.parquet as pq
from tables.segments.parquet_read import read_parquet
path = sys.argv[1]
pq.write_table(pa.table({"offset": [1, 2, 3], "v": ["a", "b", "c"]}), path)
data = open(path, "rb").read()
rows = [read_parquet(path), read_parquet(data), read_parquet(io.BytesIO(data), columns=["v"])]
assert [r.num_rows for r in rows] == [3, 3, 3], rows
if sys.argv[2] == "read_table":
    pq.read_table(path)
print("pyarrow._dataset" in sys.modules)
"""


def _dataset_loaded(tmp_path: Path, then: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "rows.parquet"), then],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip() == "True"


def test_it_reads_every_form_without_the_dataset_scanner(tmp_path):
    assert _dataset_loaded(tmp_path, "nothing") is False
    assert _dataset_loaded(tmp_path, "read_table") is True  # the probe sees the scanner when used


def test_it_gives_the_rows_and_columns_asked_for(tmp_path):
    table = pa.table({"offset": pa.array([5, 6], pa.int64()), "v": ["x", None]})
    pq.write_table(table, tmp_path / "f.parquet")
    data = (tmp_path / "f.parquet").read_bytes()
    assert read_parquet(tmp_path / "f.parquet").equals(table)
    assert read_parquet(str(tmp_path / "f.parquet")).equals(table)
    assert read_parquet(data, columns=["v"]).to_pydict() == {"v": ["x", None]}
    assert read_parquet(io.BytesIO(data), columns=[]).num_columns == 0


def test_the_project_reads_parquet_only_through_it():
    """pytest's own process too: an abort at its exit fails a green run."""
    scanner_reads = re.compile(r"\bread_table\(|ParquetDataset\(|pyarrow\._?dataset")
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("tables", "console", "monitoring", "tests", "bench")
        for path in (ROOT / package).rglob("*.py")
        if path.name not in ("parquet_read.py", Path(__file__).name)
        and scanner_reads.search(path.read_text())
    ]
    assert offenders == []
