"""Segment build throughput: the Spark builder (warm session) against pyarrow doing the same work.

Both sides start from the same staged (offset, JSON message) rows, shaped like githubEvents, and
do the same work: decode each message per the schema, derive the time column
(`fromDateTime(created_at, ...)`), sort by time, write one Parquet file and compute per-column
statistics. The Spark side is the real `build_from_staging` (including the tar.gz packing); the
pyarrow side is written here with pyarrow's JSON reader and compute functions.

    .venv/bin/python bench/build.py [--rows 100000 1000000] [--master local[2]]

Prints rows/s of each and their ratio (Spark / pyarrow) for every size. Needs no services.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.json as pj  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from tables.segments.builder import BuildRequest, build_from_staging, write_staging  # noqa: E402
from tables.segments.spark import get_session  # noqa: E402

FIXTURES = Path(os.environ.get("PINOT_FIXTURES", ROOT.parent / "shared" / "fixtures" / "pinot"))


def github_like(rows: int) -> list[bytes]:
    """`rows` messages cycling through the 800 real ones, each with a unique id."""
    source = [
        json.loads(line)
        for line in (FIXTURES / "githubEvents_2021-07-21-few-hours.json").read_text().splitlines()
        if line.strip()
    ]
    out = []
    for i in range(rows):
        row = dict(source[i % len(source)])
        row["id"] = str(10**11 + i)
        out.append(json.dumps(row, separators=(",", ":")).encode())
    return out


def pyarrow_build(messages: list[bytes], out: Path) -> int:
    """The same work as the Spark job, with pyarrow only."""
    schema = pa.schema([("id", pa.string()), ("type", pa.string()), ("created_at", pa.string())])
    table = pj.read_json(
        pa.BufferReader(b"\n".join(messages)),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )
    stamps = pc.strptime(table["created_at"], format="%Y-%m-%dT%H:%M:%S%z", unit="ms")
    table = table.append_column("created_at_timestamp", stamps)
    table = table.append_column("__offset", pa.array(range(1, len(messages) + 1), pa.int64()))
    table = table.sort_by([("created_at_timestamp", "ascending"), ("__offset", "ascending")])
    pq.write_table(table, out / "data.parquet", compression="snappy")
    for column in table.column_names:
        values = table[column]
        pc.count_distinct(values)
        pc.min_max(values)
    return table.num_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    schema = json.loads((FIXTURES / "githubEvents_schema.json").read_text())
    config = json.loads((FIXTURES / "githubEvents_realtime_table_config.json").read_text())
    spark = get_session(args.master, "2g")
    print(f"Spark {spark.version} {args.master}; pyarrow {pa.__version__}")

    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        work = Path(tmp)

        phases: dict[int, dict[str, float]] = {}

        def spark_build(messages: list[bytes], name: str) -> float:
            staging = work / f"{name}.parquet"
            write_staging(enumerate(messages, start=1), staging)
            request = BuildRequest(
                table_name="githubEvents",
                segment_name=f"githubEvents__0__{name}__20210721T0600Z",
                schema=schema,
                table_config=config,
                start_offset=1,
                end_offset=len(messages) + 1,
                creation_time_ms=int(time.time() * 1000),
            )
            (work / name).mkdir()
            started = time.perf_counter()
            result = build_from_staging(spark, request, staging.as_uri(), work / name)
            elapsed = time.perf_counter() - started
            assert result.total_docs == len(messages), result
            phases[len(messages)] = {"setup": 0.0, **result.phase_seconds}
            phases[len(messages)]["setup"] = round(elapsed - sum(result.phase_seconds.values()), 3)
            return elapsed

        spark_build(github_like(2_000), "0")  # warm the session: JVM, codegen, Python workers
        print(
            f"{'rows':>10} {'spark s':>9} {'spark rows/s':>13} {'arrow s':>9} "
            f"{'arrow rows/s':>13} {'ratio':>6}"
        )
        for count in args.rows:
            messages = github_like(count)
            spark_s = spark_build(messages, str(count))
            arrow_dir = work / f"arrow-{count}"
            arrow_dir.mkdir()
            started = time.perf_counter()
            assert pyarrow_build(messages, arrow_dir) == count
            arrow_s = time.perf_counter() - started
            print(
                f"{count:>10} {spark_s:>9.2f} {count / spark_s:>13,.0f} {arrow_s:>9.2f} "
                f"{count / arrow_s:>13,.0f} {arrow_s / spark_s:>6.2f}"
            )
        print("Spark build phases (seconds):")
        for count in args.rows:
            print(f"{count:>10} " + "  ".join(f"{k} {v:.2f}" for k, v in phases[count].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
