"""`python manage.py run_controller [--host H] [--port P] [--interval S]`: a controller process.

It registers as the participant `Controller_<host>_<port>` (tag `controller`, an ephemeral live
instance), serves the whole API from its own threaded HTTP server (the completion FSMs live in
this process), and every `--interval` seconds re-registers if its session was lost, refreshes the
leadControllerResource EXTERNALVIEW and the EXTERNALVIEW of each table it leads. SIGTERM or
SIGINT stops it after the current step: the server shuts down and the ZooKeeper session closes, so
its live instance disappears at once.
"""

from __future__ import annotations

import logging
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.core.servers.basehttp import (
    ThreadedWSGIServer,
    WSGIRequestHandler,
    get_internal_wsgi_application,
)
from kazoo.exceptions import NodeExistsError

from tables.controller import context
from tables.controller.externalviews import (
    CONTROLLER_TAG,
    refresh_lead_controller_view,
    refresh_table_views,
)
from tables.zk.cluster import init_cluster
from tables.zk.participants import register_participant

log = logging.getLogger("tables.controller")


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
        try:
            while not stop.is_set():
                self.step(instance_id, host, port)
                stop.wait(float(options["interval"]))
        finally:
            server.shutdown()
            server.server_close()
            ctx.client.stop()
            ctx.client.close()
            self.stdout.write(f"controller {instance_id} stopped")

    def step(self, instance_id: str, host: str, port: int) -> None:
        """One round; errors are logged and the next round tries again."""
        try:
            ctx = context.current()
            try:
                register_participant(
                    ctx.client, ctx.paths, instance_id, host, port, [CONTROLLER_TAG]
                )
            except NodeExistsError:
                log.warning(
                    "%s: an older session still holds the live instance; retrying", instance_id
                )
                return
            refresh_lead_controller_view(ctx)
            refresh_table_views(ctx, instance_id)
        except Exception:
            log.exception("controller step failed; retrying")
