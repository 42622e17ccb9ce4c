"""`python manage.py run_server --instance Server_<host>_<port>`: an ingestion server.

It registers the participant (tag `DefaultTenant_REALTIME` unless `--tag` is given, repeatable),
hosts the segments the IdealStates assign to it (consuming, completing, fetching committed
copies), and serves its admin HTTP (`/tables/<t>/consumingSegmentsInfo`, `/metrics`, `/health`,
`/health/liveness`, `/health/readiness`) on `--admin-port` (default: the instance's port).
Committed segments are built by the Spark worker (`tables.spark_build_segment` on the `spark`
queue), whose results the committers poll (`tables.server.build_results`: one Redis result
backend for all threads, no result-channel subscriptions). Every LIVE_PUBLISH_SECONDS it
publishes its consuming segments' live state to Redis (`tables.server.live`, TTL
LIVE_STATE_TTL_SECONDS). `/health/readiness` is Pinot's startup status
(`tables.server.readiness`: REALTIME_CONSUMPTION_CATCHUP_WAIT_MS and
ENABLE_REALTIME_OFFSET_BASED_CONSUMPTION_STATUS_CHECKER).
SIGTERM or SIGINT stops publishing (deleting the live-state key), stops consuming, closes the admin
server and the ZooKeeper session, so the live instance disappears at once.
"""

from __future__ import annotations

import re
import signal
import threading
from functools import partial

from celery import current_app
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from monitoring.server_metrics import server_registry
from tables import builds
from tables.cluster import context
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.server.admin import AdminServer
from tables.server.build_results import configure_for_polling, poll_for
from tables.server.committer import BuildHandle
from tables.server.instance import DEFAULT_TAG, ServerInstance
from tables.server.live import LivePublisher
from tables.server.readiness import ServerReadiness
from tables.zk.client import connection_problem

#: How often the main thread looks whether it was told to stop. Seen once (a 16-partition bench):
#: a server sat in an untimed wait after its SIGTERM, with its handler never run, until killed.
STOP_CHECK_S = 1.0
_INSTANCE = re.compile(r"^Server_(?P<host>.+)_(?P<port>\d{1,5})$")


def submit_build(
    table: str, segment: str, staging_key: str, start: int, end: int, output_key: str
) -> BuildHandle:
    """The committer's build: `tables.spark_build_segment` on the spark queue, its result polled
    together with the other committers' (`tables.server.build_results`)."""
    from tables.tasks import spark_build_segment  # on first use: it imports pyspark

    return poll_for(
        spark_build_segment.apply_async(
            args=(table, segment, staging_key, start, end, output_key), queue="spark"
        )
    )


def _scrape(registry: CollectorRegistry) -> tuple[bytes, str]:
    return generate_latest(registry), CONTENT_TYPE_LATEST


class Command(BaseCommand):
    help = "Run an ingestion server: consume partitions, run the completion protocol, admin HTTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--instance", required=True, help="Server_<host>_<port>")
        parser.add_argument("--tag", action="append", help=f"tenant tag (default {DEFAULT_TAG})")
        parser.add_argument("--admin-port", type=int, help="admin HTTP port (default: the port)")
        parser.add_argument("--hold-seconds", type=float, default=1.0)

    def handle(self, *args: object, **options: object) -> None:
        instance_id = str(options["instance"])
        match = _INSTANCE.match(instance_id)
        if match is None:
            raise CommandError(f"--instance {instance_id!r}: expected Server_<host>_<port>")
        host, port = match["host"], int(match["port"])
        admin_port = options["admin_port"] if options["admin_port"] is not None else port
        configure_for_polling(current_app)  # before the first build is published
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())

        ctx = context.current()
        server = ServerInstance(
            instance_id,
            host,
            port,
            context.current,
            builds.deep_store,
            submit_build,
            settings.SERVER_DATA_DIR / instance_id,
            tags=list(options["tag"] or [DEFAULT_TAG]),
            admin_port=int(admin_port),
            token=cluster_token(),
            hold_s=float(options["hold_seconds"]),
        )
        registry = server_registry(server)
        readiness = ServerReadiness(
            server,
            partial(connection_problem, settings.ZK_HOSTS, settings.ZK_TIMEOUT_SECONDS),
            settings.REALTIME_CONSUMPTION_CATCHUP_WAIT_MS,
            settings.ENABLE_REALTIME_OFFSET_BASED_CONSUMPTION_STATUS_CHECKER,
        )
        try:
            admin = AdminServer(server, host, int(admin_port), lambda: _scrape(registry), readiness)
        except OSError as exc:
            raise CommandError(f"admin port {admin_port}: {exc}") from exc
        publisher = LivePublisher(
            server,
            get_redis(settings.REDIS_URL),
            settings.CLUSTER_NAME,
            interval_s=settings.LIVE_PUBLISH_SECONDS,
            ttl_s=settings.LIVE_STATE_TTL_SECONDS,
        )
        admin.start()
        server.start()
        readiness.start()
        publisher.start()
        self.stdout.write(f"server {instance_id} admin http://{host}:{admin.port}/")
        self.stdout.flush()
        try:
            # A timed wait: the signal's handler runs at the latest when the wait times out.
            while not stop.wait(STOP_CHECK_S):
                pass
        finally:
            readiness.stop()
            publisher.stop()
            server.stop()
            admin.stop()
            ctx.client.stop()
            ctx.client.close()
            self.stdout.write(f"server {instance_id} stopped")
