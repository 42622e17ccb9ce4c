"""`python manage.py run_controller [--host H] [--port P] [--interval S]`: a controller process.

It registers as the participant `Controller_<host>_<port>` (tag `controller`, an ephemeral live
instance), serves the whole API from its own threaded HTTP server (the completion FSMs live in
this process), and every `--interval` seconds re-registers if its session was lost, refreshes the
leadControllerResource EXTERNALVIEW and the EXTERNALVIEW of each table it leads. SIGTERM or
SIGINT stops it after the current step: the server shuts down and the ZooKeeper session closes, so
its live instance disappears at once. While ZooKeeper is unreachable the steps back off (the
interval doubling up to 10 s) and log one line a minute per cause; the same client reconnects and
the next step re-registers on the new session.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.core.servers.basehttp import (
    ThreadedWSGIServer,
    WSGIRequestHandler,
    get_internal_wsgi_application,
)

from tables.cluster import context
from tables.controller.externalviews import (
    CONTROLLER_TAG,
    refresh_lead_controller_view,
    refresh_table_views,
)
from tables.domain.backoff import Backoff, LogThrottle
from tables.outages import outage_reason
from tables.zk.cluster import init_cluster
from tables.zk.errors import NodeExists
from tables.zk.participants import register_participant

log = logging.getLogger("tables.controller")
STEP_BACKOFF_CAP_S = 10.0


class Command(BaseCommand):
    help = "Run a controller: participant, completion protocol endpoints, API, views."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=9000)
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between steps")

    def handle(self, *args: object, **options: object) -> None:
        host, port = str(options["host"]), int(options["port"])
        instance_id = f"Controller_{host}_{port}"
        # The API served here answers as this controller (process-local settings).
        settings.CONTROLLER_INSTANCE_ID = instance_id
        settings.CONTROLLER_VIP_URL = f"http://{host}:{port}"
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())

        ctx = context.current()
        init_cluster(ctx.client, ctx.paths)
        server = ThreadedWSGIServer((host, port), WSGIRequestHandler)
        server.set_app(get_internal_wsgi_application())
        thread = threading.Thread(target=server.serve_forever, name="controller-http", daemon=True)
        thread.start()
        self.stdout.write(f"controller {instance_id} serving http://{host}:{port}/", ending="\n")
        self.stdout.flush()
        interval = float(options["interval"])
        backoff = Backoff(first=interval, cap=max(STEP_BACKOFF_CAP_S, interval))
        throttle = LogThrottle(every_s=60.0)
        try:
            while not stop.is_set():
                if self.step(instance_id, host, port, throttle):
                    backoff.reset()
                    stop.wait(interval)
                else:
                    stop.wait(backoff.next_delay())
        finally:
            server.shutdown()
            server.server_close()
            ctx.client.stop()
            ctx.client.close()
            self.stdout.write(f"controller {instance_id} stopped")

    def step(
        self, instance_id: str, host: str, port: int, throttle: LogThrottle | None = None
    ) -> bool:
        """One round; False when it failed (logged, at most once a minute per cause while a store
        is down) and the next round should back off."""
        throttle = throttle or LogThrottle(every_s=60.0)
        try:
            ctx = context.current()
            try:
                register_participant(
                    ctx.client, ctx.paths, instance_id, host, port, [CONTROLLER_TAG]
                )
            except NodeExists:
                if throttle.allow("older-session", time.monotonic())[0]:
                    log.warning(
                        "%s: an older session still holds the live instance; retrying",
                        instance_id,
                    )
                return False
            refresh_lead_controller_view(ctx)
            refresh_table_views(ctx, instance_id)
            return True
        except Exception as exc:
            reason = outage_reason(exc)
            key = type(exc).__name__ if reason is not None else repr(exc)
            write, held = throttle.allow(key, time.monotonic())
            if write and reason is not None:
                log.warning("controller step: %s; retrying (%d similar held back)", reason, held)
            elif write:
                log.exception("controller step failed; retrying")
            return False
