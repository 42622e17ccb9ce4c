"""`python manage.py create_demo_table [--wait] [--servers N] [--timeout S] [--topic T]`.

Creates the demo's two REALTIME tables on one Redis topic of `--partitions` partitions, creating
the topic when missing (files in `tables/demo/`): githubEvents (replication 2, small flush
thresholds) and githubEventsPauseless (the same with pauseless consumption and peer download over
http), which ingest the same rows. With `--wait` it first polls until the cluster is initialised
and `--servers` servers tagged DefaultTenant_REALTIME are live, and fails after `--timeout`
seconds. Safe to run again (the demo's producer runs it on every start): an existing table is
reported and left alone (exit 0), never deleted; a missing one is created. Should the Redis topic
be gone (Redis lost its data), it is recreated empty, continuing past every offset the cluster
knows of, and the data loss is reported on stderr with "DATA LOSS:" lines, per table (see
`tables.demo.seed`).
"""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tables.cluster import context
from tables.cluster.errors import ServiceError
from tables.demo.seed import DEFAULT_TOPIC, DemoError, create_demo_tables, wait_for_servers
from tables.redisconn import get_redis
from tables.streams.base import StreamError


class Command(BaseCommand):
    help = (
        "Create the demo tables (githubEvents and githubEventsPauseless, replication 2) on a "
        "Redis topic; idempotent."
    )
    requires_system_checks = []  # --wait handles a cluster that is still starting

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--topic", default=DEFAULT_TOPIC)
        parser.add_argument("--partitions", type=int, default=4)
        parser.add_argument(
            "--wait", action="store_true", help="wait for the cluster and --servers live servers"
        )
        parser.add_argument("--servers", type=int, default=3, help="live servers to wait for")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds --wait waits")

    def handle(self, *args: object, **options: Any) -> None:
        if options["partitions"] < 1 or options["servers"] < 0 or options["timeout"] < 0:
            raise CommandError("--partitions must be >= 1; --servers and --timeout >= 0")
        try:
            if options["wait"]:
                wait_for_servers(context.current, options["servers"], options["timeout"], self._say)
            outcomes = create_demo_tables(
                context.current(),
                get_redis(settings.REDIS_URL),
                options["topic"],
                options["partitions"],
            )
        except (DemoError, ServiceError, StreamError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        except redis.RedisError as exc:
            raise CommandError(f"Redis at {settings.REDIS_URL} failed: {exc}") from exc
        for outcome in outcomes:
            for note in outcome.notes:
                self._say(note)
            for line in outcome.data_loss:
                self.stderr.write(line)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
