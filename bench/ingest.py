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
  `threshold_rows` = the rows of its partition, timed from their start until the last of them
  reports `segmentConsumed` at `rowLimit`. Their completion client has no lead controller, so its
  calls return NOT_SENT; the consumers are stopped after the measurement.

    .venv/bin/python bench/ingest.py [--rows N] [--repeat 3] [--redis-url redis://...]
    .venv/bin/python bench/ingest.py --stream kafka [--bootstrap HOST:PORT] [--rows N] ...

`--stream kafka` compares the same two kinds of reader over a Kafka topic, in steady state. The
topic holds short githubEvents-like rows (the real rows cut to `id`, `type`, `actor.login`,
`repo.name` and `created_at`, with the `__key`: ~167 bytes). Without `--bootstrap` the bench
starts librdkafka's mock cluster (`tests/kafka_mock.py`), which keeps only 5 MiB of message sets
per partition: uncompressed, `--rows` is capped to what fits (~24k rows a partition);
`--compression zstd` (the producer's `compression.codec`; the mock stores the compressed sets)
fits ~140k rows a partition (`--rows 560000`). Whatever the cluster dropped while filling is
below its low watermarks, and the sides read from there. A real cluster through `--bootstrap`
has no such cap: the topic is created through the Admin API and deleted at the end.

Both sides read with the server's librdkafka settings for the topic's stream config
(`client_config`; `--consumer-prop NAME=VALUE` adds `stream.kafka.consumer.prop.NAME` to that
config, for both), one consumer per partition, one thread per partition, and are measured the
same way: each consumer connects, is assigned and reads its partition's first `--batch` rows
OUTSIDE the timed window (librdkafka prefetches in the background from then on, on both sides);
the window runs from the threads' start to the last of the remaining rows of every partition:

- the plain loop: per partition, `consume(--batch)` without waiting, `poll` when the queue is
  empty, every row's offset and value into lists;
- the server: the real `SegmentConsumer`s over one shared `KafkaStreamProvider` made from the
  stream config by `provider_for` (as a server makes a table's), whose per-partition readers did
  the warm-up fetch, each started after it with `threshold_rows` = the rest of its partition;
  the window ends when the last of them reports `segmentConsumed` at `rowLimit`.

With librdkafka's defaults a consumer whose queue reaches `queued.min.messages` (100k) stops
fetching for `fetch.queue.backoff.ms` (1 s): past 100k rows a partition (`--compression zstd`),
both sides then wait on that pause; `--consumer-prop fetch.queue.backoff.ms=10` lifts it.

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
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from tables.domain.completion_response import Response  # noqa: E402
from tables.redisconn import get_redis  # noqa: E402
from tables.server.consumer import (  # noqa: E402
    ConsumingSegment,
    PartitionStats,
    Phase,
    SegmentConsumer,
)
from tables.server.protocol import CompletionClient, LeaderLocator  # noqa: E402
from tables.streams.base import StreamProvider, TopicAdmin, provider_for  # noqa: E402
from tables.streams.kafka import (  # noqa: E402
    KafkaStreamProvider,
    KafkaTopicAdmin,
    client_config,
)
from tables.streams.kafka_config import CONSUMER_PROP  # noqa: E402
from tables.streams.producer import (  # noqa: E402
    DEFAULT_KEY_FIELD,
    Producer,
    SourceRow,
    keyed_value,
    read_rows,
)
from tables.streams.redis_streams import (  # noqa: E402
    DEFAULT_KEY_PREFIX,
    FIRST_OFFSET,
    RedisStreamProvider,
    RedisTopicAdmin,
)

FIXTURES = Path(os.environ.get("PINOT_FIXTURES", ROOT.parent / "shared" / "fixtures" / "pinot"))
PARTITIONS = 4
TABLE = "benchIngest_REALTIME"
MOCK_PARTITION_BYTES = 4_500_000  # librdkafka's mock drops message sets past 5 MiB a partition
MOCK_MESSAGE_OVERHEAD = 20  # a record's own bytes in a v2 message set, and the set's header


class NoLeader(LeaderLocator):
    """A locator that never finds the lead controller: every protocol call returns NOT_SENT."""

    def __init__(self) -> None:
        super().__init__(ctx=lambda: None)  # type: ignore[arg-type,return-value]

    def _lookup(self, table: str) -> str | None:
        return None


class Finishes(CompletionClient):
    """The consumers' completion client (no lead controller: NOT_SENT); notes when each segment
    first reports segmentConsumed (`perf_counter`), i.e. when its last row was in."""

    def __init__(self) -> None:
        super().__init__("Server_127.0.0.1_7001", NoLeader())
        self.at: dict[str, float] = {}

    def segment_consumed(
        self, table: str, segment: str, offset: int, reason: str | None, row_count: int
    ) -> Response:
        self.at.setdefault(segment, time.perf_counter())
        return super().segment_consumed(table, segment, offset, reason, row_count)


def github_rows(short: bool = False) -> list[SourceRow]:
    """The 800 githubEvents rows of Pinot's example; `short`: each cut to a few short fields."""
    source = list(read_rows(FIXTURES / "githubEvents_2021-07-21-few-hours.json"))
    if not short:
        return source
    return [
        SourceRow(
            {
                "id": row.fields["id"],
                "type": row.fields["type"],
                "actor": {"login": row.fields["actor"]["login"]},
                "repo": {"name": row.fields["repo"]["name"]},
                "created_at": row.fields["created_at"],
            }
        )
        for row in source
    ]


def message_bytes(source: list[SourceRow], key: int) -> float:
    """The mean size of a message made from `source` with a key of `key`'s width."""
    return sum(len(keyed_value(row, DEFAULT_KEY_FIELD, key)[1]) for row in source) / len(source)


def fill(
    admin: TopicAdmin, topic: str, rows: int, source: list[SourceRow]
) -> tuple[dict[int, int], float]:
    """`rows` messages (`source` cycled) over the topic's partitions: (rows per partition, mean
    size of a message in bytes)."""
    admin.create_topic(topic, PARTITIONS)
    stats = Producer(admin, topic, PARTITIONS, count=rows, batch_size=2000).run(
        itertools.cycle(source)
    )
    return {p: stats.per_partition.get(p, 0) for p in range(PARTITIONS)}, message_bytes(
        source, rows // 2
    )


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
    starts: dict[int, int] | None = None,
) -> tuple[int, float]:
    """One SegmentConsumer per partition, concurrently, up to rowLimit: (rows, seconds from
    their start to the last one's segmentConsumed)."""

    def first(partition: int) -> int:  # where the partition's consumer starts
        return FIRST_OFFSET if starts is None else starts[partition]

    topic = provider.topic
    completion = Finishes()
    now_ms = int(time.time() * 1000)
    consumers = []
    for partition, count in counts.items():
        spec = ConsumingSegment(
            table=TABLE,
            segment=f"benchIngest__{partition}__{run + 1}__20210721T0600Z",
            topic=topic,
            partition=partition,
            start_offset=first(partition),
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
        elapsed = max(completion.at[c.spec.segment] for c in consumers) - started
        for c in consumers:
            rows = counts[c.spec.partition]
            expected = first(c.spec.partition) + rows
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


KAFKA_SIDES = {"plain": "plain confluent-kafka loop", "server": "server (4 consumers)"}
WAIT_S = 10.0  # longest wait for a first message


def kafka_warm_up(provider: KafkaStreamProvider, partition: int, low: int, rows: int) -> None:
    """The partition's `rows` rows from `low` through the provider (connects and assigns its
    reader there)."""
    deadline = time.monotonic() + WAIT_S
    next_offset = low
    while next_offset < low + rows:
        wanted = low + rows - next_offset
        next_offset = provider.fetch(partition, next_offset, wanted, 1000).next_offset
        if time.monotonic() > deadline:
            raise RuntimeError(f"warm-up of partition {partition} stuck at {next_offset}")


def kafka_plain_consumers(
    config: dict[str, str], topic: str, lows: dict[int, int], warm: int
) -> list[Consumer]:
    """One plain consumer per partition, assigned at its low watermark, `warm` messages read."""
    consumers = []
    for partition in range(PARTITIONS):
        consumer = Consumer(config)
        consumers.append(consumer)
        consumer.assign([TopicPartition(topic, partition, lows[partition])])
        deadline, taken = time.monotonic() + WAIT_S, 0
        while taken < warm:
            messages = consumer.consume(warm - taken, 1.0)
            if any(m.error() is not None for m in messages) or time.monotonic() > deadline:
                raise RuntimeError(f"warm-up of partition {partition} failed at {taken} rows")
            taken += len(messages)
    return consumers


def kafka_plain_read(consumer: Consumer, rows: int, batch: int, ends: list[float]) -> None:
    """`rows` rows of one consumer into (offsets, values) lists: `consume(batch)` without
    waiting, `poll` when its queue is empty; appends the time of the last row to `ends`."""
    offsets: list[int] = []
    values: list[bytes | None] = []
    while len(offsets) < rows:
        messages = consumer.consume(batch, 0)
        if not messages:
            first = consumer.poll(WAIT_S)
            if first is None:
                raise RuntimeError(f"the plain loop saw nothing for {WAIT_S} s")
            messages = [first]
        for message in messages:
            if message.error() is not None:
                raise RuntimeError(f"plain loop: {message.error()}")
            offsets.append(message.offset())
            values.append(message.value())
    ends.append(time.perf_counter())
    if len(offsets) != rows:
        raise RuntimeError(f"the plain loop read {len(offsets)} rows, not {rows}")


def kafka_plain_loop(consumers: list[Consumer], counts: dict[int, int], batch: int) -> float:
    """Every consumer's next `counts[partition]` rows, one thread per consumer (as the server
    has): seconds from their start to the last row."""
    ends: list[float] = []
    threads = [
        threading.Thread(target=kafka_plain_read, args=(consumers[p], count, batch, ends))
        for p, count in counts.items()
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if len(ends) != len(threads):
        raise RuntimeError("a plain loop failed (see its traceback above)")
    return max(ends) - started


class KafkaSides:
    """The two sides of the Kafka comparison over the filled topic: each reads offsets
    `[low + warm, high)` of every partition in the timed window (see the module docstring).
    Both read with the server's settings for the topic's stream config (`admin.stream_config`
    with `props` as `stream.kafka.consumer.prop.<name>`), the server through `provider_for`."""

    names = KAFKA_SIDES

    def __init__(self, admin: KafkaTopicAdmin, topic: str, batch: int, props: dict[str, str]):
        self.topic, self.batch = topic, batch
        self.stream_config = {
            **admin.stream_config(topic),
            **{f"{CONSUMER_PROP}{name}": value for name, value in props.items()},
        }
        with self.provider() as provider:
            marks = {p: provider.watermarks(p) for p in range(PARTITIONS)}
        self.lows = {p: low for p, (low, _) in marks.items()}
        self.held = {p: high - low for p, (low, high) in marks.items()}
        self.warm = min(batch, min(self.held.values()) // 2)
        self.starts = {p: low + self.warm for p, low in self.lows.items()}
        self.timed = {p: held - self.warm for p, held in self.held.items()}

    def provider(self) -> KafkaStreamProvider:
        provider = provider_for(self.stream_config, "")  # as a server makes a table's provider
        assert isinstance(provider, KafkaStreamProvider)
        return provider

    def run(self, side: str, run: int) -> tuple[int, float]:
        if side == "plain":
            config = client_config(self.stream_config)
            consumers = kafka_plain_consumers(config, self.topic, self.lows, self.warm)
            try:
                return sum(self.timed.values()), kafka_plain_loop(consumers, self.timed, self.batch)
            finally:
                for consumer in consumers:
                    consumer.close()
        with self.provider() as provider:
            for partition, low in self.lows.items():
                kafka_warm_up(provider, partition, low, self.warm)
            return server_consumers(provider, self.timed, self.batch, run, self.starts)


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
    parser.add_argument(
        "--compression",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        default="none",
        help="Kafka: the producer's compression.codec (more rows fit on the mock)",
    )
    parser.add_argument(
        "--consumer-prop",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="Kafka: a client setting for both sides, as stream.kafka.consumer.prop.NAME",
    )
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
        counts, mean = fill(admin, topic, args.rows, github_rows())
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
    source = github_rows(short=True)
    produce = {} if args.compression == "none" else {"compression.codec": args.compression}
    if bootstrap is None:
        from tests.kafka_mock import start_mock

        mock = start_mock(brokers=3)
        bootstrap = mock.bootstrap
        if not produce:  # compressed, more fits: the sides read what the mock kept
            stored = message_bytes(source, rows) + MOCK_MESSAGE_OVERHEAD
            rows = min(rows, int(PARTITIONS * MOCK_PARTITION_BYTES / stored))
    if mock is not None:  # the producer's admin compresses; the readers' has the plain settings
        writer, admin = mock.admin(**produce), mock.admin()
    else:
        writer, admin = KafkaTopicAdmin(bootstrap, produce), KafkaTopicAdmin(bootstrap)
    topic = f"bench-ingest-{uuid.uuid4().hex[:10]}"
    print(
        f"CPUs: {os.cpu_count()}; Python {sys.version.split()[0]}; confluent-kafka "
        f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]}); "
        f"Kafka at {bootstrap}" + (" (librdkafka's mock cluster)" if mock else "")
    )
    try:
        started = time.perf_counter()
        counts, mean = fill(writer, topic, rows, source)
        writer.close()
        props = dict(prop.split("=", 1) for prop in args.consumer_prop)
        sides = KafkaSides(admin, topic, args.batch, props)
        timed = sum(sides.timed.values())
        dropped = sum(sides.lows.values())
        print(
            f"topic {topic}: {sum(counts.values())} short githubEvents rows (~{mean:.0f} bytes "
            f"each, compression {args.compression}) in {PARTITIONS} partitions "
            f"{[counts[p] for p in range(PARTITIONS)]}, filled in "
            f"{time.perf_counter() - started:.1f} s"
            + (
                f" (the cluster kept {sum(sides.held.values())}: {dropped} dropped)"
                if dropped
                else ""
            )
            + f"; batch {args.batch}\neach run: connect, assign and read {sides.warm} rows of "
            f"every partition untimed, then time the next {timed} rows "
            f"({[sides.timed[p] for p in range(PARTITIONS)]}; {timed * mean / 1e6:.1f} MB)"
        )
        warm = {side: sides.run(side, -1)[1] for side in KAFKA_SIDES}
        print("warm-up (not counted): " + ", ".join(f"{s} {t:.3f} s" for s, t in warm.items()))
        measure(sides, timed, args.repeat)
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
