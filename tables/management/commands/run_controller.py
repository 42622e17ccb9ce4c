"""`python manage.py run_controller [--host H] [--port P] [--interval S]`: a controller process.

It registers as the participant `Controller_<host>_<port>` (tag `controller`, an ephemeral live
instance), serves the whole API from its own threaded HTTP server (the completion FSMs of the
tables it leads live in this process), takes part in leadControllerResource (it is MASTER of the
partitions the cluster leader gives it, and may itself be the cluster leader) and keeps the
EXTERNALVIEW of the tables it leads (`tables.controller.process`). Several controllers share the
partitions; LEAD_CONTROLLER_REBALANCE_DELAY_MS is how long a dead one's partitions wait for it.
SIGTERM or SIGINT hands its partitions over (after the protocol calls in flight, up to
CONTROLLER_STOP_COMMIT_WAIT_SECONDS), then the server shuts down and the ZooKeeper session
closes, so its live instance disappears at once.
"""

from __future__ import annotations

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.core.servers.basehttp import (
    ThreadedWSGIServer,
    WSGIRequestHandler,
    get_internal_wsgi_application,
)

from tables import builds
from tables.cluster import context
from tables.controller import completion
from tables.controller.process import ControllerProcess
from tables.healing_triggers import request_leader_validation
from tables.http_servers import NoDelay
from tables.zk.cluster import init_cluster

#: Connections the kernel queues while the HTTP thread is busy accepting. socketserver's default
#: of 5 overflows when every replica of a paused table calls segmentConsumed at once; a dropped
#: connection is retried by the caller's kernel only after TCP's 1 s initial SYN timeout.
LISTEN_BACKLOG = 1024


class _ControllerHTTPServer(NoDelay, ThreadedWSGIServer):
    request_queue_size = LISTEN_BACKLOG


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

        def manager(leads):
            return completion.CompletionManager(
                context.current,
                instance_id,
                settings.CONTROLLER_VIP_URL,
                builds.deep_store,
                leads=leads,
            )

        process = ControllerProcess(
            host,
            port,
            manager,
            settings.LEAD_CONTROLLER_REBALANCE_DELAY_MS,
            request_leader_validation,
        )
        completion.install(process.manager)
        stop = threading.Event()

        def on_signal(*_: object) -> None:
            stop.set()
            process.wake.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)

        ctx = context.current()
        init_cluster(ctx.client, ctx.paths)
        process.start(ctx)
        server = _ControllerHTTPServer((host, port), WSGIRequestHandler)
        server.set_app(get_internal_wsgi_application())
        thread = threading.Thread(target=server.serve_forever, name="controller-http", daemon=True)
        thread.start()
        self.stdout.write(f"controller {instance_id} serving http://{host}:{port}/", ending="\n")
        self.stdout.flush()
        try:
            process.run(stop, float(options["interval"]))
            process.hand_over(settings.CONTROLLER_STOP_COMMIT_WAIT_SECONDS)
        finally:
            server.shutdown()
            server.server_close()
            ctx.client.stop()
            ctx.client.close()
            self.stdout.write(f"controller {instance_id} stopped")
