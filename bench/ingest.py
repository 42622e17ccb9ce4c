"""Ingestion rate of one server: its 4 partition consumers against a plain XRANGE loop.

A fresh 4-partition topic of the embedded Redis stream is pre-filled with `--rows` githubEvents
rows (the 800 real ones of Pinot's example, cycled, each with a unique `__key` spliced in and
partitioned by it, as the project's `Producer` does). After one uncounted pass of each side (it
warms the heap and Redis), `--repeat` runs of both, alternating which goes first:

- the XRANGE loop: redis-py `XRANGE` over each partition's stream key in chunks of `--batch`,
  collecting (offset, value) pairs into lists, one partition after the other: the minimal work a
  consumer must do;
- the server: the real `SegmentConsumer`, one per partition running concurrently (as one server
  does for the 4 partitions it hosts) over one shared `RedisStreamProvider`, each with
  `threshold_rows` = the rows of its partition, timed from start until all four have stopped at
  `rowLimit`. Their completion client has no lead controller, so its calls return NOT_SENT; the
  consumers are stopped after the measurement.

    .venv/bin/python bench/ingest.py [--rows N] [--repeat 2] [--redis-url redis://...]

Prints rows/s of each side per run, their ratio (server / XRANGE loop) and its median. Needs only
Redis (>= 7): `--redis-url`, by default the REDIS_URL setting. The topic is deleted at the end.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from tables.redisconn import get_redis  # noqa: E402
from tables.server.consumer import (  # noqa: E402
    ConsumingSegment,
    PartitionStats,
    Phase,
    SegmentConsumer,
)
from tables.server.protocol import CompletionClient, LeaderLocator  # noqa: E402
from tables.streams.producer import Producer, read_rows  # noqa: E402
from tables.streams.redis_streams import (  # noqa: E402
    DEFAULT_KEY_PREFIX,
    FIRST_OFFSET,
    RedisStreamProvider,
    RedisTopicAdmin,
)

FIXTURES = Path(os.environ.get("PINOT_FIXTURES", ROOT.parent / "shared" / "fixtures" / "pinot"))
PARTITIONS = 4
TABLE = "benchIngest_REALTIME"


class NoLeader(LeaderLocator):
    """A locator that never finds the lead controller: every protocol call returns NOT_SENT."""

    def __init__(self) -> None:
        super().__init__(ctx=lambda: None)  # type: ignore[arg-type,return-value]

    def _lookup(self, table: str) -> str | None:
        return None


def fill(admin: RedisTopicAdmin, topic: str, rows: int) -> tuple[dict[int, int], float]:
    """`rows` githubEvents messages over the topic's partitions: (rows per partition, mean size
    of a source row in bytes)."""
    source = list(read_rows(FIXTURES / "githubEvents_2021-07-21-few-hours.json"))
    admin.create_topic(topic, PARTITIONS)
    stats = Producer(admin, topic, PARTITIONS, count=rows, batch_size=2000).run(
        itertools.cycle(source)
    )
    mean = sum(len(row.text or "") for row in source) / len(source)
    return {p: stats.per_partition.get(p, 0) for p in range(PARTITIONS)}, mean


def xrange_loop(client: redis.Redis, topic: str, batch: int) -> tuple[int, float]:
    """Every partition read with XRANGE in chunks into (offsets, values) lists: (rows, seconds)."""
    kept: list[tuple[list[int], list[bytes]]] = []
    started = time.perf_counter()
    for partition in range(PARTITIONS):
        key = f"{DEFAULT_KEY_PREFIX}{topic}:{partition}"
        offsets: list[int] = []
        values: list[bytes] = []
        start = f"0-{FIRST_OFFSET}"
        while True:
            entries = client.xrange(key, min=start, max="+", count=batch)
            for entry_id, fields in entries:
                offsets.append(int(entry_id.partition(b"-")[2]))
                values.append(fields[b"v"])
            if len(entries) < batch:
                break
            start = f"0-{offsets[-1] + 1}"
        kept.append((offsets, values))
    elapsed = time.perf_counter() - started
    return sum(len(offsets) for offsets, _ in kept), elapsed


def server_consumers(
    client: redis.Redis, topic: str, counts: dict[int, int], batch: int, run: int
) -> tuple[int, float]:
    """One SegmentConsumer per partition, concurrently, up to rowLimit: (rows, seconds)."""
    provider = RedisStreamProvider(client, topic)
    completion = CompletionClient("Server_127.0.0.1_7001", NoLeader())
    now_ms = int(time.time() * 1000)
    consumers = []
    for partition, count in counts.items():
        spec = ConsumingSegment(
            table=TABLE,
            segment=f"benchIngest__{partition}__{run + 1}__20210721T0600Z",
            topic=topic,
            partition=partition,
            start_offset=FIRST_OFFSET,
            threshold_rows=count,
            window_ms=24 * 3600 * 1000,
            creation_ms=now_ms,
        )
        stats = PartitionStats(TABLE, topic, partition)
        consumers.append(
            SegmentConsumer(spec, provider, completion, lambda *_: False, stats, fetch_batch=batch)
        )
    started = time.perf_counter()
    for consumer in consumers:
        consumer.start()
    try:
        while not all(c.end_reason is not None for c in consumers):
            failed = [c.spec.segment for c in consumers if c.phase is Phase.ERROR or c.finished]
            # (a consumer at its row limit keeps asking the controller: it never finishes here)
            if failed:
                raise RuntimeError(f"consumers ended before their row limit: {failed}")
            if time.perf_counter() - started > 3600:
                raise RuntimeError("consumers still running after an hour")
            time.sleep(0.002)
        elapsed = time.perf_counter() - started
        for c in consumers:
            expected = FIRST_OFFSET + counts[c.spec.partition]
            if c.end_reason != "rowLimit" or c.next_offset != expected or c.rows != expected - 1:
                raise RuntimeError(f"{c.spec.segment}: {c.end_reason} at {c.next_offset}")
        return sum(c.rows for c in consumers), elapsed
    finally:
        for consumer in consumers:
            consumer.stop()
        for consumer in consumers:
            consumer.join(10)


def default_redis_url() -> str:
    """The REDIS_URL setting (Django settings `console.settings` unless the environment says)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django
    from django.conf import settings

    django.setup()
    return settings.REDIS_URL


def line(label: str, rows: int, seconds: float) -> str:
    return f"{label}: {rows} rows in {seconds:.2f} s = {rows / seconds / 1000:.0f}k rows/s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2000, help="fetch / XRANGE chunk size")
    parser.add_argument("--redis-url", default=None, help="default: the REDIS_URL setting")
    args = parser.parse_args()
    url = args.redis_url or default_redis_url()

    client = get_redis(url)  # the client a server's provider gets
    admin = RedisTopicAdmin(client)
    topic = f"bench-ingest-{uuid.uuid4().hex[:10]}"
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(
        f"CPUs: {os.cpu_count()} (usable {affinity}); Python {sys.version.split()[0]}; "
        f"redis-py {redis.__version__}; Redis {client.info('server')['redis_version']} at {url}"
    )
    try:
        started = time.perf_counter()
        counts, mean = fill(admin, topic, args.rows)
        total = sum(counts.values())
        print(
            f"topic {topic}: {total} githubEvents rows (~{mean:.0f} bytes each) in {PARTITIONS} "
            f"partitions {[counts[p] for p in range(PARTITIONS)]}, filled in "
            f"{time.perf_counter() - started:.1f} s; batch {args.batch}"
        )
        # Not counted: grows this process's heap (the consumer threads' malloc arenas too) and
        # touches every entry once, so run 1 pays no first-time costs that later runs do not.
        warm = [
            xrange_loop(client, topic, args.batch),
            server_consumers(client, topic, counts, args.batch, -1),
        ]
        print(f"warm-up (not counted): xrange {warm[0][1]:.2f} s, server {warm[1][1]:.2f} s")
        ratios = []
        for run in range(args.repeat):
            figures: dict[str, tuple[int, float]] = {}
            order = ["xrange", "server"] if run % 2 == 0 else ["server", "xrange"]
            print(f"run {run + 1} ({order[0]} first):")
            for side in order:
                if side == "xrange":
                    figures[side] = xrange_loop(client, topic, args.batch)
                else:
                    figures[side] = server_consumers(client, topic, counts, args.batch, run)
            for side in order:
                rows, seconds = figures[side]
                if rows != total:
                    raise RuntimeError(f"{side} read {rows} rows, not {total}")
                label = "xrange loop" if side == "xrange" else "server (4 consumers)"
                print("  " + line(label, rows, seconds))
            ratio = figures["xrange"][1] / figures["server"][1]
            ratios.append(ratio)
            print(f"  ratio server / xrange loop: {ratio:.2f}")
        print(
            f"median ratio server / xrange loop over {len(ratios)} runs: "
            f"{statistics.median(ratios):.2f}"
        )
    finally:
        admin.delete_topic(topic)
    return 0


if __name__ == "__main__":
    sys.exit(main())
