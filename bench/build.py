"""Segment build throughput: the Spark builder (warm session) against pyarrow doing the same work,
and N small segments built in one batch against the same N built one by one.

Both sides start from the same staged (offset, JSON message) rows, shaped like githubEvents, and
do the same work: decode each message per the schema, derive the time column
(`fromDateTime(created_at, ...)`), sort by time, write one Parquet file and compute per-column
statistics. The Spark side is the real `build_from_staging` (including the tar.gz packing); the
pyarrow side is written here with pyarrow's JSON reader and compute functions. Warm means what a
long-running spark worker has: `--warmup` builds of `--warmup-rows` rows come first (the JVM's JIT
compiles the JSON parser during the first few hundred thousand rows), and pyarrow is warmed too.
Each size runs `--repeat` times, Spark and pyarrow back to back; the ratio is of the medians.

The batch part (`--batch 16 --batch-rows 1000`): 16 segments of 1,000 rows built one after the
other with `build_from_staging`, then the same 16 in one `build_batch` (what the spark worker does
with the builds of a pause), with the check that every batched tar equals its single build.

    .venv/bin/python bench/build.py [--rows 100000 1000000] [--master local[2]] [--repeat 2]
    .venv/bin/python bench/build.py --transforms airlineStats [--rows 100000] [--repeat 3]

Prints rows/s of each, their ratio (Spark / pyarrow) for every size and the goal (issue 18:
1M rows at least 0.7x, 100k at least 0.3x), the Spark phases, then the batch times. Needs no
services.

`--transforms airlineStats` measures instead what a table's ingestion transforms cost a build
(issue 23): Pinot's airlineStats schema and realtime table config (fixtures), whose
`ingestionConfig.transformConfigs` (as written: `ts` and `tsRaw` = `fromEpochDays(DaysSinceEpoch)`)
fill two TIMESTAMP columns, against the same schema and config without `transformConfigs`,
whose rows carry those two values instead (computed here in Python; its messages are ~40
bytes longer, two more fields to parse), so both sides write the same columns. The rows come
from the schema (`tables.streams.producer.synthetic_rows`, a pool of 20,000 distinct rows,
seeded, cycled with `DaysSinceEpoch` spread over 31 days; ~1.9 KB each); each side's
rows are staged once per size. Both sides are the real `build_from_staging` on one warm Spark
session (`--warmup` builds of `--warmup-rows` rows of each side first), `--repeat` runs of each
size alternating which side goes first; every run checks that both segments have the same rows
(same CRC of data.parquet). Prints each run's times and rows/s, the ratio of the medians
(transforms / none; goal: at most 1.3x) and both sides' Spark phases of the last run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.json as pj  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from tables.segments.builder import (  # noqa: E402
    BatchItem,
    BuildRequest,
    build_batch,
    build_from_staging,
    write_staging,
)
from tables.segments.spark import get_session  # noqa: E402
from tables.streams.producer import synthetic_rows  # noqa: E402

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


def request_for(name: str, rows: int, schema: dict, config: dict) -> BuildRequest:
    return BuildRequest(
        table_name="githubEvents",
        segment_name=f"githubEvents__0__{name}__20210721T0600Z",
        schema=schema,
        table_config=config,
        start_offset=1,
        end_offset=rows + 1,
        creation_time_ms=1626847200000,
    )


def batch_part(spark, work: Path, schema: dict, config: dict, count: int, rows: int) -> None:
    """`count` segments of `rows` rows: one by one, then in one batch; the tars must be equal."""
    staging = work / "batch-rows.parquet"
    write_staging(enumerate(github_like(rows), start=1), staging)
    requests = [request_for(str(1000 + i), rows, schema, config) for i in range(count)]
    started = time.perf_counter()
    alone = [
        build_from_staging(spark, req, str(staging), work / f"alone-{i}")
        for i, req in enumerate(requests)
    ]
    alone_s = time.perf_counter() - started
    items = [BatchItem(req, str(staging), work / f"batched-{i}") for i, req in enumerate(requests)]
    started = time.perf_counter()
    batched = build_batch(spark, items, work / "batch-scratch")
    batch_s = time.perf_counter() - started
    for one, many in zip(alone, batched, strict=True):
        assert not isinstance(many, Exception), many
        assert one.tar_path.read_bytes() == many.tar_path.read_bytes(), one.segment_name
    print(
        f"{count} segments of {rows:,} rows: one by one {alone_s:.2f} s "
        f"({alone_s / count:.2f} s each), in one batch {batch_s:.2f} s "
        f"({alone_s / batch_s:.1f}x faster; every tar identical to its single build)"
    )


DAY_MS = 86_400_000
FIRST_DAY = 18_809  # 2021-07-01
POOL = 20_000  # distinct generated rows, cycled
# What each airlineStats transform computes, for the side without transforms (by expression).
PYTHON_TRANSFORMS = {"fromepochdays(dayssinceepoch)": lambda day: day * DAY_MS}


def airline_sides(fixture: str) -> tuple[dict, dict, dict, list[str]]:
    """(schema, table config as written, the same config without transformConfigs, the columns
    the transforms fill)."""
    schema = json.loads((FIXTURES / f"{fixture}_schema.json").read_text())
    config = json.loads((FIXTURES / f"{fixture}_realtime_table_config.json").read_text())
    plain = copy.deepcopy(config)
    transforms = plain["ingestionConfig"].pop("transformConfigs")
    for transform in transforms:
        expression = transform["transformFunction"].replace(" ", "").lower()
        if expression not in PYTHON_TRANSFORMS:
            raise SystemExit(f"the bench cannot compute {transform} for the side without it")
    return schema, config, plain, [t["columnName"] for t in transforms]


def stage_airline(
    schema: dict, config: dict, filled: list[str], rows: int, with_path: Path, without_path: Path
) -> float:
    """Both sides' staging files for `rows` rows; returns the mean message size (transforms)."""
    time_column = config["segmentsConfig"]["timeColumnName"]
    generated = synthetic_rows(
        schema, lambda: 1626847200000, random.Random(23), skip=[time_column, *filled]
    )
    bodies = [json.dumps(next(generated).fields, separators=(",", ":"))[1:] for _ in range(POOL)]
    computed = {
        t["columnName"]: PYTHON_TRANSFORMS[t["transformFunction"].replace(" ", "").lower()]
        for t in config["ingestionConfig"]["transformConfigs"]
    }

    def messages(fill: bool) -> Iterator[tuple[int, bytes]]:
        for i in range(rows):
            day = FIRST_DAY + (i * 7) % 31
            head = f'{{"{time_column}":{day},'
            if fill:
                head += "".join(f'"{column}":{computed[column](day)},' for column in filled)
            yield i + 1, (head + bodies[i % POOL]).encode()

    write_staging(messages(False), with_path)
    write_staging(messages(True), without_path)
    head = len(f'{{"{time_column}":{FIRST_DAY},')
    return head + sum(len(body) for body in bodies) / POOL


def transforms_part(spark, work: Path, fixture: str, args: argparse.Namespace) -> None:
    """The `--transforms` comparison (see the module docstring)."""
    schema, config, plain, filled = airline_sides(fixture)
    sides = {"transforms": config, "none": plain}
    phases: dict[str, dict[str, float]] = {}

    def build(side: str, staging: Path, rows: int, name: str) -> tuple[float, int]:
        request = BuildRequest(
            table_name=fixture,
            segment_name=f"{fixture}__0__{name}__20210721T0600Z",
            schema=schema,
            table_config=sides[side],
            start_offset=1,
            end_offset=rows + 1,
            creation_time_ms=1626847200000,
        )
        out = work / f"{side}-{name}"
        started = time.perf_counter()
        result = build_from_staging(spark, request, str(staging), out)
        elapsed = time.perf_counter() - started
        assert result.total_docs == rows and not result.incomplete_rows, result
        spent = {k: v for k, v in result.phase_seconds.items() if k != "batch_size"}
        phases[side] = {"setup": round(elapsed - sum(spent.values()), 3), **spent}
        shutil.rmtree(out)
        return elapsed, result.crc

    def stage(rows: int) -> dict[str, Path]:
        paths = {side: work / f"{side}-{rows}.parquet" for side in sides}
        started = time.perf_counter()
        mean = stage_airline(schema, config, filled, rows, paths["transforms"], paths["none"])
        print(
            f"{rows:,} rows staged in {time.perf_counter() - started:.1f} s: ~{mean:.0f} bytes "
            f"each ({len(schema['dimensionFieldSpecs'])} dimensions, "
            f"{len(schema['dateTimeFieldSpecs'])} date-time columns; {', '.join(filled)} "
            f"filled by the transforms or in the rows)",
            flush=True,
        )
        return paths

    warm = stage(args.warmup_rows)
    for i in range(args.warmup):  # JVM, JIT, codegen, both plans' cached expressions
        for side in sides:
            build(side, warm[side], args.warmup_rows, f"9{i}")
    print(
        f"{'rows':>10} {'run':>4} {'transforms s':>13} {'rows/s':>10} {'none s':>8} {'rows/s':>10}"
    )
    summary = []
    for rows in args.rows:
        staged = stage(rows)
        times: dict[str, list[float]] = {side: [] for side in sides}
        for run in range(1, args.repeat + 1):
            order = list(sides) if run % 2 else list(sides)[::-1]
            crcs = {}
            for side in order:
                seconds, crcs[side] = build(side, staged[side], rows, str(run))
                times[side].append(seconds)
            if crcs["transforms"] != crcs["none"]:
                raise SystemExit(f"the two sides built different rows (CRC {crcs})")
            with_s, without_s = times["transforms"][-1], times["none"][-1]
            print(
                f"{rows:>10} {run:>4} {with_s:>13.2f} {rows / with_s:>10,.0f} "
                f"{without_s:>8.2f} {rows / without_s:>10,.0f}  ({order[0]} first)",
                flush=True,
            )
        with_s, without_s = statistics.median(times["transforms"]), statistics.median(times["none"])
        summary.append(
            f"{rows:>10} rows: transforms {with_s:.2f} s, none {without_s:.2f} s (medians): "
            f"ratio {with_s / without_s:.2f}x (goal: at most 1.3x); best of {args.repeat}: "
            f"{min(times['transforms']) / min(times['none']):.2f}x"
        )
        for path in staged.values():
            path.unlink()
    print("\n".join(summary))
    print("Spark build phases of the last run (seconds):")
    for side, spent in phases.items():
        print(f"{side:>10} " + "  ".join(f"{k} {v:.2f}" for k, v in spent.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each size (median)")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted Spark builds first")
    parser.add_argument("--warmup-rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=16, help="segments batched (0: none)")
    parser.add_argument("--batch-rows", type=int, default=1_000)
    parser.add_argument(
        "--transforms",
        choices=["airlineStats"],
        help="a fixture's ingestion transforms against none (instead of the pyarrow comparison)",
    )
    args = parser.parse_args()
    if args.transforms:
        spark = get_session(args.master, "2g")
        print(f"Spark {spark.version} {args.master}; transforms of {args.transforms}")
        with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
            transforms_part(spark, Path(tmp), args.transforms, args)
        return 0

    schema = json.loads((FIXTURES / "githubEvents_schema.json").read_text())
    config = json.loads((FIXTURES / "githubEvents_realtime_table_config.json").read_text())
    spark = get_session(args.master, "2g")
    print(f"Spark {spark.version} {args.master}; pyarrow {pa.__version__}")
    goals = {100_000: 0.3, 1_000_000: 0.7}

    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        work = Path(tmp)
        phases: dict[int, dict[str, float]] = {}

        def spark_build(messages: list[bytes], name: str) -> float:
            staging = work / f"{name}.parquet"
            write_staging(enumerate(messages, start=1), staging)
            request = request_for(name, len(messages), schema, config)
            (work / name).mkdir()
            started = time.perf_counter()
            result = build_from_staging(spark, request, staging.as_uri(), work / name)
            elapsed = time.perf_counter() - started
            assert result.total_docs == len(messages), result
            spent = {k: v for k, v in result.phase_seconds.items() if k != "batch_size"}
            phases[len(messages)] = {"setup": round(elapsed - sum(spent.values()), 3), **spent}
            staging.unlink()
            return elapsed

        def arrow_build(messages: list[bytes], name: str) -> float:
            arrow_dir = work / f"arrow-{name}"
            arrow_dir.mkdir()
            started = time.perf_counter()
            assert pyarrow_build(messages, arrow_dir) == len(messages)
            return time.perf_counter() - started

        warm = github_like(args.warmup_rows)
        for i in range(args.warmup):  # JVM, JIT, codegen, Python workers
            spark_build(warm, f"90{i}")
        arrow_build(warm, "warm")
        print(
            f"{'rows':>10} {'run':>4} {'spark s':>9} {'spark rows/s':>13} {'arrow s':>9} "
            f"{'arrow rows/s':>13} {'ratio':>6}"
        )
        summary = []
        for count in args.rows:
            messages = github_like(count)
            spark_times, arrow_times = [], []
            for run in range(1, args.repeat + 1):
                spark_s = spark_build(messages, f"{count}{run}")
                arrow_s = arrow_build(messages, f"{count}-{run}")
                spark_times.append(spark_s)
                arrow_times.append(arrow_s)
                print(
                    f"{count:>10} {run:>4} {spark_s:>9.2f} {count / spark_s:>13,.0f} "
                    f"{arrow_s:>9.2f} {count / arrow_s:>13,.0f} {arrow_s / spark_s:>6.2f}",
                    flush=True,
                )
            spark_s, arrow_s = statistics.median(spark_times), statistics.median(arrow_times)
            goal = goals.get(count)
            wanted = f" (goal: at least {goal}x)" if goal else ""
            summary.append(
                f"{count:>10} rows: Spark {spark_s:.2f} s, pyarrow {arrow_s:.2f} s (medians): "
                f"ratio {arrow_s / spark_s:.2f}x{wanted}"
            )
            del messages
        print("\n".join(summary))
        print("Spark build phases of the last run (seconds):")
        for count in args.rows:
            print(f"{count:>10} " + "  ".join(f"{k} {v:.2f}" for k, v in phases[count].items()))
        if args.batch:
            batch_part(spark, work, schema, config, args.batch, args.batch_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
