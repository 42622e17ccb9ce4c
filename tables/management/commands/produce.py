"""Produce rows to a topic of the embedded Redis stream at settings.REDIS_URL, or of Kafka.

    manage.py produce --topic T --partitions N --rate R (--file rows.json | --schema S)
                      [--count C] [--key-field F] [--key-prefix P] [--batch-size B]
                      [--stream redis | --stream kafka --bootstrap HOST:PORT[,HOST:PORT...]]

`--stream` picks the stream: `redis` (the default, the embedded one; `--key-prefix` is its key
prefix) or `kafka` (`--bootstrap` is the cluster's broker list; topics are created and grown
through Kafka's Admin API, so a cluster without it, such as librdkafka's mock, needs the topic
created beforehand with at least N partitions).

The topic is created with N partitions when missing, and grown to N when it has fewer; asking for
fewer partitions than it has is refused (partition counts only grow). `--file` replays a JSON-lines
or JSON-array file once, as written (`--count` stops earlier); `--schema` generates rows from a
Pinot schema until `--count` rows or Ctrl-C. Each row carries a unique key field (see
`tables.streams.producer`), which also picks its partition. A progress line is printed at most
once a second, and a summary line at the end (also after Ctrl-C).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tables.redisconn import get_redis
from tables.streams.base import StreamError, StreamProvider, TopicAdmin
from tables.streams.kafka import FIRST_OFFSET as KAFKA_FIRST_OFFSET
from tables.streams.kafka import KafkaTopicAdmin
from tables.streams.producer import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_KEY_FIELD,
    Producer,
    ProduceStats,
    SourceRow,
    read_rows,
    synthetic_rows,
)
from tables.streams.redis_streams import (
    DEFAULT_KEY_PREFIX,
    FIRST_OFFSET,
    RedisTopicAdmin,
)


class Command(BaseCommand):
    help = "Produce rows (a file replayed, or generated from a Pinot schema) to an embedded topic."
    requires_system_checks = []  # it needs Redis only; a ZooKeeper outage must not block it

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--topic", required=True)
        parser.add_argument("--partitions", type=int, required=True)
        parser.add_argument(
            "--rate", type=float, required=True, help="rows per second; 0 = as fast as possible"
        )
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--file", type=Path, help="JSON lines or a JSON array of objects")
        source.add_argument("--schema", type=Path, help="a Pinot schema JSON file")
        parser.add_argument("--count", type=int, default=None, help="stop after this many rows")
        parser.add_argument("--key-field", default=DEFAULT_KEY_FIELD)
        parser.add_argument("--key-prefix", default=DEFAULT_KEY_PREFIX, help="Redis key prefix")
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
        parser.add_argument("--stream", choices=("redis", "kafka"), default="redis")
        parser.add_argument(
            "--bootstrap", default=None, help="Kafka broker list host:port[,...] (--stream kafka)"
        )

    def handle(self, *args: object, **options: Any) -> None:
        topic: str = options["topic"]
        partitions: int = options["partitions"]
        if partitions < 1 or options["rate"] < 0 or (options["count"] or 0) < 0:
            raise CommandError("--partitions must be >= 1; --rate and --count must be >= 0")
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be >= 1")
        admin, self._first_offset = self._admin(options)
        rows = self._rows(options)
        self._provider = admin.provider(topic)
        producer = Producer(
            admin,
            topic,
            partitions,
            rate=options["rate"],
            count=options["count"],
            key_field=options["key_field"],
            batch_size=options["batch_size"],
            on_progress=self._progress,
        )
        interrupted = False
        try:
            self._ensure_topic(admin, topic, partitions)
            producer.first_key = self._messages_so_far(admin, topic)
            producer.run(rows)
        except KeyboardInterrupt:
            interrupted = True
        except (StreamError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        except NotImplementedError as exc:
            raise CommandError(str(exc)) from exc
        except redis.RedisError as exc:
            raise CommandError(f"Redis at {settings.REDIS_URL} failed: {exc}") from exc
        finally:
            if isinstance(admin, KafkaTopicAdmin):
                admin.close()
        self._summary(producer.stats, topic, partitions, interrupted)
        self._provider.close()

    @staticmethod
    def _admin(options: dict[str, Any]) -> tuple[RedisTopicAdmin | KafkaTopicAdmin, int]:
        """The stream's admin and its first offset."""
        if options["stream"] == "kafka":
            if not options["bootstrap"]:
                raise CommandError("--stream kafka needs --bootstrap HOST:PORT[,HOST:PORT...]")
            return KafkaTopicAdmin(options["bootstrap"]), KAFKA_FIRST_OFFSET
        if options["bootstrap"]:
            raise CommandError("--bootstrap is for --stream kafka")
        return RedisTopicAdmin(get_redis(settings.REDIS_URL), options["key_prefix"]), FIRST_OFFSET

    def _rows(self, options: dict[str, Any]) -> Iterable[SourceRow]:
        if options["file"] is not None:
            try:
                return list(read_rows(options["file"]))  # all parsed before the first row goes
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot replay rows: {exc}") from exc
        try:
            schema = json.loads(Path(options["schema"]).read_text(encoding="utf-8"))
            if not isinstance(schema, dict):
                raise ValueError("a schema is a JSON object")
            return synthetic_rows(
                schema, lambda: time.time_ns() // 1_000_000, skip=(options["key_field"],)
            )
        except (OSError, ValueError, KeyError) as exc:
            raise CommandError(f"cannot use schema {options['schema']}: {exc}") from exc

    def _messages_so_far(self, admin: TopicAdmin, topic: str) -> int:
        """How many messages the topic has ever received (offsets are never reused, even after
        retention trims): this run's keys start there, so they never repeat an earlier run's."""
        provider = self._provider
        return sum(
            provider.latest_offset(p) - self._first_offset
            for p in range(provider.partition_count())
        )

    def _ensure_topic(self, admin: TopicAdmin, topic: str, partitions: int) -> None:
        before = admin.ensure_topic(topic, partitions)
        if before == 0:
            self.stdout.write(f"created topic {topic!r} with {partitions} partitions")
        elif partitions < before:  # ensure_topic never shrinks: nothing changed
            raise CommandError(
                f"topic {topic!r} has {before} partitions; refusing to decrease it to "
                f"{partitions} (partition counts only grow)"
            )
        elif partitions > before:
            self.stdout.write(f"topic {topic!r}: partitions {before} -> {partitions}")

    def _offsets(self, partitions: int) -> str:
        provider: StreamProvider = self._provider
        try:
            return " ".join(f"p{p}={provider.latest_offset(p)}" for p in range(partitions))
        except (StreamError, ValueError, redis.RedisError) as exc:
            return f"unavailable ({exc})"

    def _progress(self, stats: ProduceStats) -> None:
        rate = stats.rows_per_second(time.monotonic())
        partitions = self._provider.partition_count()
        self.stdout.write(
            f"{stats.rows} rows, {rate:.1f} rows/s, latest offsets {self._offsets(partitions)}"
        )

    def _summary(self, stats: ProduceStats, topic: str, partitions: int, interrupted: bool) -> None:
        elapsed = time.monotonic() - stats.started
        status = "interrupted" if interrupted else "done"
        self.stdout.write(
            f"{status}: {stats.rows} rows to topic {topic!r} ({partitions} partitions) in "
            f"{elapsed:.1f} s ({stats.rows_per_second(time.monotonic()):.1f} rows/s), "
            f"latest offsets {self._offsets(partitions)}"
        )
