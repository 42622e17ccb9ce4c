"""Ingestion rate of one server: its 4 partition consumers against a plain XRANGE loop.

A fresh 4-partition topic of the embedded Redis stream is pre-filled with `--rows` githubEvents
rows (the 800 real ones of Pinot's example, cycled, each with a unique `__key` spliced in and
partitioned by it, as the project's `Producer` does). After one uncounted pass of each side (it
warms the heap and Redis), `--repeat` runs of the three sides, rotating which goes first:

- the plain XRANGE loop (the reference of the goal): redis-py `XRANGE` over each partition's
  stream key in chunks of `--batch`, replies left unparsed by redis-py (as the server's provider
  reads them), every row's offset parsed from its id and its bytes taken, into lists, one
  partition after the other: the minimal work a consumer must do;
- the same loop through redis-py's default XRANGE reply parsing (a dict per entry, `fields[b"v"]`):
  the reference of the figures measured before issue 18, printed for comparison;
- the server: the real `SegmentConsumer`, one per partition running concurrently (as one server
  does for the 4 partitions it hosts) over one shared `RedisStreamProvider`, each with
  `threshold_rows` = the rows of its partition, timed from start until all four have stopped at
  `rowLimit`. Their completion client has no lead controller, so its calls return NOT_SENT; the
  consumers are stopped after the measurement.

    .venv/bin/python bench/ingest.py [--rows N] [--repeat 3] [--redis-url redis://...]
    .venv/bin/python bench/ingest.py --stream kafka [--bootstrap HOST:PORT] [--rows N] ...

`--stream kafka` runs two sides over a Kafka topic instead: a plain confluent-kafka consume loop
(one consumer assigned all 4 partitions, `consume(--batch)` without waiting, `poll` when its queue
is empty, every row's offset and value taken into per-partition lists) against the server's 4
`SegmentConsumer`s over one shared `KafkaStreamProvider`. Without `--bootstrap` it starts
librdkafka's mock cluster (`tests/kafka_mock.py`), which keeps only about 5 MB per partition:
`--rows` is then capped to fit (a real cluster through `--bootstrap` has no such cap; the topic
is then created through the Admin API and deleted at the end).

Prints rows/s of each side per run, the ratios server / plain loop (goal: at least 0.8) and
server / parsed loop, their medians over the runs and the ratios of each side's best time (which
load from other processes distorts least). Needs only Redis (>= 7): `--redis-url`, by default the
REDIS_URL setting (the Django settings are loaded either way: set SECRET_KEY or DEBUG=1). The
topic is deleted at the end.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
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
from tables.streams.base import StreamProvider, TopicAdmin  # noqa: E402
from tables.streams.kafka import FIRST_OFFSET as KAFKA_FIRST_OFFSET  # noqa: E402
from tables.streams.kafka import KafkaTopicAdmin  # noqa: E402
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
MOCK_PARTITION_BYTES = 4_500_000  # librdkafka's mock drops message sets past ~5 MB a partition


class NoLeader(LeaderLocator):
    """A locator that never finds the lead controller: every protocol call returns NOT_SENT."""

    def __init__(self) -> None:
        super().__init__(ctx=lambda: None)  # type: ignore[arg-type,return-value]

    def _lookup(self, table: str) -> str | None:
        return None


def fill(admin: TopicAdmin, topic: str, rows: int) -> tuple[dict[int, int], float]:
    """`rows` githubEvents messages over the topic's partitions: (rows per partition, mean size
    of a source row in bytes)."""
    source = list(read_rows(FIXTURES / "githubEvents_2021-07-21-few-hours.json"))
    admin.create_topic(topic, PARTITIONS)
    stats = Producer(admin, topic, PARTITIONS, count=rows, batch_size=2000).run(
        itertools.cycle(source)
    )
    mean = sum(len(row.text or "") for row in source) / len(source)
    return {p: stats.per_partition.get(p, 0) for p in range(PARTITIONS)}, mean


def xrange_loop(client: redis.Redis, topic: str, batch: int, raw: bool) -> tuple[int, float]:
    """Every partition read with XRANGE in chunks into (offsets, values) lists: (rows, seconds).
    `raw`: `client` leaves XRANGE replies unparsed (entries are [id, [field, value, ...]])."""
    kept: list[tuple[list[int], list[bytes]]] = []
    started = time.perf_counter()
    for partition in range(PARTITIONS):
        key = f"{DEFAULT_KEY_PREFIX}{topic}:{partition}"
        offsets: list[int] = []
        values: list[bytes] = []
        start = f"0-{FIRST_OFFSET}"
        while True:
            entries = client.xrange(key, min=start, max="+", count=batch)
            if raw:  # the produce script writes the value first: [b"v", value, b"t", time]
                for entry_id, fields in entries:
                    offsets.append(int(entry_id.partition(b"-")[2]))
                    values.append(fields[1])
            else:
                for entry_id, fields in entries:
                    offsets.append(int(entry_id.partition(b"-")[2]))
                    values.append(fields[b"v"])
            if len(entries) < batch:
                break
            start = f"0-{offsets[-1] + 1}"
        kept.append((offsets, values))
    elapsed = time.perf_counter() - started
    return sum(len(offsets) for offsets, _ in kept), elapsed


def unparsed_client(client: redis.Redis) -> redis.Redis:
    """A client on `client`'s pool whose XRANGE replies are left as Redis sent them."""
    raw = redis.Redis(connection_pool=client.connection_pool)
    raw.set_response_callback("XRANGE", lambda response, **options: response)
    return raw


def server_consumers(
    provider: StreamProvider,
    counts: dict[int, int],
    batch: int,
    run: int,
    first_offset: int = FIRST_OFFSET,
) -> tuple[int, float]:
    """One SegmentConsumer per partition, concurrently, up to rowLimit: (rows, seconds)."""
    topic = provider.topic
    completion = CompletionClient("Server_127.0.0.1_7001", NoLeader())
    now_ms = int(time.time() * 1000)
    consumers = []
    for partition, count in counts.items():
        spec = ConsumingSegment(
            table=TABLE,
            segment=f"benchIngest__{partition}__{run + 1}__20210721T0600Z",
            topic=topic,
            partition=partition,
            start_offset=first_offset,
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
            time.sleep(0.01)  # the harness: seldom, so it takes the GIL from them seldom
        elapsed = time.perf_counter() - started
        for c in consumers:
            expected = first_offset + counts[c.spec.partition]
            rows = expected - first_offset
            if c.end_reason != "rowLimit" or c.next_offset != expected or c.rows != rows:
                raise RuntimeError(f"{c.spec.segment}: {c.end_reason} at {c.next_offset}")
        return sum(c.rows for c in consumers), elapsed
    finally:
        for consumer in consumers:
            consumer.stop()
        for consumer in consumers:
            consumer.join(10)


def django_settings() -> object:
    """Django settings (`console.settings` unless the environment says), set up: the server's
    code reads them (the cluster token, FAULT_INJECTION_DIR) whatever `--redis-url` says."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("DEBUG", "1")  # a bench: no SECRET_KEY needed
    import django
    from django.conf import settings

    django.setup()
    return settings


SIDES = {
    "plain": "plain XRANGE loop",
    "parsed": "XRANGE loop, redis-py parsing",
    "server": "server (4 consumers)",
}


def line(label: str, rows: int, seconds: float) -> str:
    return f"{label}: {rows} rows in {seconds:.2f} s = {rows / seconds / 1000:.0f}k rows/s"


class Sides:
    """Runs one side of the comparison over the filled topic."""

    names = SIDES

    def __init__(self, client: redis.Redis, topic: str, counts: dict[int, int], batch: int):
        self.client, self.raw = client, unparsed_client(client)
        self.topic, self.counts, self.batch = topic, counts, batch

    def run(self, side: str, run: int) -> tuple[int, float]:
        if side == "plain":
            return xrange_loop(self.raw, self.topic, self.batch, raw=True)
        if side == "parsed":
            return xrange_loop(self.client, self.topic, self.batch, raw=False)
        provider = RedisStreamProvider(self.client, self.topic)
        return server_consumers(provider, self.counts, self.batch, run)


KAFKA_SIDES = {"plain": "plain confluent-kafka consume loop", "server": "server (4 consumers)"}


def kafka_consume_loop(bootstrap: str, topic: str, total: int, batch: int) -> tuple[int, float]:
    """All partitions through one plain consumer into per-partition lists: (rows, seconds)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": "false",
            "auto.offset.reset": "error",
        }
    )
    kept: dict[int, tuple[list[int], list[bytes]]] = {p: ([], []) for p in range(PARTITIONS)}
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, KAFKA_FIRST_OFFSET) for p in range(PARTITIONS)])
    rows = 0
    while rows < total:
        messages = consumer.consume(batch, 0)
        if not messages:
            first = consumer.poll(5.0)
            if first is None:
                raise RuntimeError(f"the plain loop saw nothing for 5 s at {rows} rows")
            messages = [first]
        for message in messages:
            if message.error() is not None:
                raise RuntimeError(f"plain loop: {message.error()}")
            offsets, values = kept[message.partition()]
            offsets.append(message.offset())
            values.append(message.value())
        rows += len(messages)
    elapsed = time.perf_counter() - started
    consumer.close()
    return rows, elapsed


class KafkaSides:
    """The two sides of the Kafka comparison over the filled topic."""

    names = KAFKA_SIDES

    def __init__(self, admin: KafkaTopicAdmin, topic: str, counts: dict[int, int], batch: int):
        self.admin, self.topic, self.counts, self.batch = admin, topic, counts, batch

    def run(self, side: str, run: int) -> tuple[int, float]:
        if side == "plain":
            total = sum(self.counts.values())
            return kafka_consume_loop(self.admin.bootstrap, self.topic, total, self.batch)
        with self.admin.provider(self.topic) as provider:
            return server_consumers(provider, self.counts, self.batch, run, KAFKA_FIRST_OFFSET)


def measure(sides: Sides | KafkaSides, total: int, repeat: int) -> None:
    """`repeat` runs of the sides (rotating the first), each run's figures and ratios, then the
    median ratios and the ratios of each side's best time (load bursts on a shared machine only
    ever slow a side down)."""
    labels = sides.names
    names = list(labels)
    times: dict[str, list[float]] = {side: [] for side in names}
    for run in range(repeat):
        order = names[run % len(names) :] + names[: run % len(names)]
        print(f"run {run + 1} ({order[0]} first):")
        for side in order:
            rows, seconds = sides.run(side, run)
            if rows != total:
                raise RuntimeError(f"{side} read {rows} rows, not {total}")
            times[side].append(seconds)
            print("  " + line(labels[side], rows, seconds))
        print("  " + ratios(times, lambda found: found[-1]))
    print(f"median over {repeat} runs: " + ratios(times, statistics.median, per_run=True))
    print(f"best of {repeat} runs: " + ratios(times, min))


def ratios(
    times: dict[str, list[float]], pick: Callable[[list[float]], float], per_run: bool = False
) -> str:
    """server / plain loop and server / parsed loop (rows/s over rows/s: time over time)."""
    refs = [side for side in times if side != "server"]
    if per_run:  # the median of the runs' ratios
        of = {
            ref: pick([r / s for r, s in zip(times[ref], times["server"], strict=True)])
            for ref in refs
        }
    else:
        of = {ref: pick(times[ref]) / pick(times["server"]) for ref in refs}
    if "parsed" not in of:  # the Kafka comparison
        return f"ratio server / plain consume loop: {of['plain']:.2f}"
    return (
        f"ratio server / plain XRANGE loop: {of['plain']:.2f} (goal >= 0.8); "
        f"server / parsed loop: {of['parsed']:.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2000, help="fetch / XRANGE chunk size")
    parser.add_argument("--redis-url", default=None, help="default: the REDIS_URL setting")
    parser.add_argument("--stream", choices=("redis", "kafka"), default="redis")
    parser.add_argument("--bootstrap", default=None, help="Kafka brokers (default: a mock)")
    args = parser.parse_args()
    settings = django_settings()
    url = args.redis_url or settings.REDIS_URL
    logging.getLogger("tables.server.consumer").setLevel(logging.WARNING)  # no line per segment
    if args.stream == "kafka":
        return kafka_main(args)

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
        sides = Sides(client, topic, counts, args.batch)
        # Not counted: grows this process's heap (the consumer threads' malloc arenas too) and
        # touches every entry once, so run 1 pays no first-time costs that later runs do not.
        warm = {side: sides.run(side, -1)[1] for side in SIDES}
        print("warm-up (not counted): " + ", ".join(f"{s} {t:.2f} s" for s, t in warm.items()))
        measure(sides, total, args.repeat)
    finally:
        admin.delete_topic(topic)
    return 0


def kafka_main(args: argparse.Namespace) -> int:
    import confluent_kafka

    mock = None
    bootstrap = args.bootstrap
    rows = args.rows
    if bootstrap is None:
        from tests.kafka_mock import start_mock

        mock = start_mock(brokers=3)
        bootstrap = mock.bootstrap
        source = list(read_rows(FIXTURES / "githubEvents_2021-07-21-few-hours.json"))
        mean = sum(len(row.text or "") + 40 for row in source) / len(source)
        rows = min(rows, int(PARTITIONS * MOCK_PARTITION_BYTES / mean))
    admin = mock.admin() if mock is not None else KafkaTopicAdmin(bootstrap)
    topic = f"bench-ingest-{uuid.uuid4().hex[:10]}"
    print(
        f"CPUs: {os.cpu_count()}; Python {sys.version.split()[0]}; confluent-kafka "
        f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]}); "
        f"Kafka at {bootstrap}" + (" (librdkafka's mock cluster)" if mock else "")
    )
    try:
        started = time.perf_counter()
        counts, mean = fill(admin, topic, rows)
        total = sum(counts.values())
        with admin.provider(topic) as provider:
            low = [provider.earliest_offset(p) for p in range(PARTITIONS)]
        if any(low):
            raise RuntimeError(f"the cluster dropped rows while filling (low watermarks {low})")
        print(
            f"topic {topic}: {total} githubEvents rows (~{mean:.0f} bytes each) in {PARTITIONS} "
            f"partitions {[counts[p] for p in range(PARTITIONS)]}, filled in "
            f"{time.perf_counter() - started:.1f} s; batch {args.batch}"
        )
        sides = KafkaSides(admin, topic, counts, args.batch)
        warm = {side: sides.run(side, -1)[1] for side in KAFKA_SIDES}
        print("warm-up (not counted): " + ", ".join(f"{s} {t:.2f} s" for s, t in warm.items()))
        measure(sides, total, args.repeat)
    finally:
        try:
            admin.delete_topic(topic)
        finally:
            admin.close()
            if mock is not None:
                mock.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
