"""Run the ZooKeeper -> database mirror sync now and print its report.

    manage.py sync_zk              # once
    manage.py sync_zk --every 5    # every 5 s until SIGTERM/SIGINT (instead of beat's schedule)

What the beat task `tables.sync_mirror` does every MIRROR_SYNC_SECONDS
(`tables.mirror.sync.sync_cluster`), in the foreground: prints tables seen/changed/deleted,
segment metadata read, partitions, ZooKeeper requests and round trips, and the duration. Once:
exits non-zero (CommandError) when the sync failed as a whole (e.g. the cluster is not
initialised); tables that could not be read are listed but do not fail the command. With
`--every`, a sync that fails because ZooKeeper is away is retried with back-off (the interval
doubling up to 30 s), printed at most once a minute; any other error ends the command.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tables.cluster import context
from tables.cluster.errors import ServiceError
from tables.domain.backoff import Backoff, LogThrottle
from tables.mirror.sync import SyncReport, sync_cluster
from tables.outages import outage_reason


class Command(BaseCommand):
    help = "Mirror the cluster's ZooKeeper state into the database, and print what it did."
    requires_system_checks = []  # ZooKeeper is checked by using it

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--every", type=float, default=0.0, help="repeat every SECONDS until stopped"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        every = float(options["every"])
        if every < 0:
            raise CommandError("--every takes a number of seconds > 0")
        if not every:
            report = self._once()
            if not report.ok:
                raise CommandError(f"sync failed: {report.error}")
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        backoff = Backoff(first=every, cap=max(every, 30.0))
        throttle = LogThrottle(every_s=60.0)
        while not stop.is_set():
            try:
                self._once()
                backoff.reset()
                stop.wait(every)
            except Exception as exc:  # ZooKeeper away: back off, one line a minute
                reason = str(exc) if isinstance(exc, CommandError) else outage_reason(exc)
                if reason is None:
                    raise
                write, held = throttle.allow("sync", time.monotonic())
                if write:
                    self.stderr.write(f"{reason} (retrying; {held} similar held back)")
                stop.wait(backoff.next_delay())

    def _once(self) -> SyncReport:
        try:
            ctx = context.current()
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        report = sync_cluster(ctx)
        for line in report.lines():
            self.stdout.write(line)
        return report
