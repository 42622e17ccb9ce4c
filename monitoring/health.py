"""Health of the components the console depends on: each one up or down, with latency.

Every check is a real round trip: a ZooKeeper session and read, a Redis PING, a SQL query, a Celery
task answered by a worker process, a Spark job run inside the Spark worker, and the age of the last
Celery beat heartbeat. Checks run concurrently, each bounded by its own timeout, so one slow or dead
component never hides the state of the others. A check never raises: failure is a result.

The Spark worker builds segments one at a time, so a probe queued behind builds would time out
exactly when Spark is busiest: a segment build that succeeded within the Spark timeout is the same
proof that Spark runs jobs, and then no probe is queued.

The ingestion check reads the database mirror: it is down when a table's rows wait upstream but
nothing was consumed, or nothing committed, for a multiple of its flush time
(`tables.mirror.flags.ingestion_problems`).

`cached_checks(max_age_s)` answers from the last full run when it is younger than `max_age_s`
(Django's cache, per process; one run at a time refreshes it), so anonymous /healthz calls never
queue Celery or Spark round trips of their own.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from tables.redisconn import get_redis
from tables.zk.client import get_client

__all__ = ["CHECKS", "CheckResult", "cached_checks", "record_beat_heartbeat", "run_checks"]

BEAT_KEY = "console:health:beat"
PING_TASK = "console.ping"  # console.tasks.ping
CACHE_KEY = "console:health:results"
_refreshing = threading.Lock()


@dataclass(frozen=True)
class CheckResult:
    name: str
    label: str
    ok: bool
    latency_ms: float
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _zookeeper() -> str:
    client = get_client(settings.ZK_HOSTS, timeout=settings.HEALTH_TIMEOUT_SECONDS)
    cluster = f"/{settings.CLUSTER_NAME}"
    present = client.exists(cluster) is not None
    state = "initialised" if present else "not initialised yet"
    session = f"0x{client.client_id[0]:x}" if client.client_id else "?"
    return f"{settings.ZK_HOSTS} (session {session}); cluster {cluster} {state}"


def _redis() -> str:
    client = get_redis(settings.REDIS_URL, timeout=settings.HEALTH_TIMEOUT_SECONDS)
    try:
        version = client.info("server").get("redis_version", "?")
    except redis.RedisError as exc:
        raise RuntimeError(f"{settings.REDIS_URL}: {exc}") from None
    return f"Redis {version} at {settings.REDIS_URL}"


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return f"{connection.vendor} ({connection.settings_dict['NAME']})"


def _celery_worker() -> str:
    from celery import current_app

    timeout = settings.HEALTH_TIMEOUT_SECONDS
    # By name (console.tasks imports this module). expires: if no worker is listening, the probe
    # must not linger in the queue.
    result = current_app.send_task(PING_TASK, expires=timeout)
    reply = result.get(timeout=timeout)
    return f"task answered by worker process {reply['pid']}"


def _recent_build(within_s: float) -> str:
    """What the newest segment build that succeeded within `within_s` says, or ""."""
    from django.utils import timezone

    from tables.models import Job

    since = timezone.now() - dt.timedelta(seconds=within_s)
    job = (
        Job.objects.filter(status=Job.Status.SUCCEEDED, finished_at__gte=since)
        .order_by("-finished_at")
        .first()
    )
    if job is None or job.finished_at is None:
        return ""
    age = (timezone.now() - job.finished_at).total_seconds()
    return (
        f"Spark built {job.segment} {age:.0f} s ago in {job.worker or 'the spark worker'} "
        f"({job.duration_ms or 0} ms; no probe queued behind the builds)"
    )


def _spark() -> str:
    from tables.tasks import spark_probe

    timeout = settings.HEALTH_SPARK_TIMEOUT_SECONDS
    recent = _recent_build(timeout)
    if recent:
        return recent
    reply = spark_probe.apply_async(expires=timeout).get(timeout=timeout)
    return (
        f"Spark {reply['version']} ({reply['master']}) ran a job in {reply['seconds']} s "
        f"in worker process {reply['pid']}"
    )


def _celery_beat() -> str:
    client = get_redis(settings.REDIS_URL, timeout=settings.HEALTH_TIMEOUT_SECONDS)
    raw = client.get(BEAT_KEY)
    if raw is None:
        raise RuntimeError("no heartbeat yet: is `celery beat` running?")
    age = time.time() - float(raw)
    limit = 3 * settings.BEAT_HEARTBEAT_SECONDS
    if age > limit:
        raise RuntimeError(f"last heartbeat {age:.0f} s ago (expected every {limit / 3:g} s)")
    return f"last heartbeat {age:.1f} s ago"


def _ingestion() -> str:
    from django.utils import timezone

    from tables.mirror.flags import ingestion_problems
    from tables.models import MirroredTable

    problems = ingestion_problems(int(timezone.now().timestamp() * 1000))
    if problems:
        shown = "; ".join(f"{table}: {reason}" for table, reason in problems[:5])
        more = f" (and {len(problems) - 5} more tables)" if len(problems) > 5 else ""
        raise RuntimeError(shown + more)
    realtime = MirroredTable.objects.filter(table_type="REALTIME").count()
    return f"{realtime} realtime table(s): no table's rows wait without being consumed or committed"


def record_beat_heartbeat(now: float) -> None:
    get_redis(settings.REDIS_URL).set(BEAT_KEY, repr(now), ex=3600)


CHECKS: dict[str, tuple[str, Callable[[], str]]] = {
    "zookeeper": ("ZooKeeper", _zookeeper),
    "redis": ("Redis", _redis),
    "database": ("Database", _database),
    "celery_worker": ("Celery worker", _celery_worker),
    "celery_beat": ("Celery beat", _celery_beat),
    "spark": ("Spark", _spark),
    "ingestion": ("Ingestion", _ingestion),
}
_USES_DATABASE = ("database", "spark", "ingestion")


def _run_one(name: str) -> CheckResult:
    label, check = CHECKS[name]
    started = time.perf_counter()
    try:
        detail, ok = check(), True
    except Exception as exc:  # every failure is a result, never an error page
        detail, ok = f"{type(exc).__name__}: {exc}".strip(), False
    finally:
        if name in _USES_DATABASE:
            connection.close()  # this ran in a pool thread: do not leak its connection
    latency = round((time.perf_counter() - started) * 1000, 1)
    return CheckResult(name=name, label=label, ok=ok, latency_ms=latency, detail=detail)


def run_checks(names: list[str] | None = None) -> list[CheckResult]:
    """Run the named checks (all when None) concurrently; results in CHECKS order."""
    selected = [name for name in CHECKS if names is None or name in names]
    with ThreadPoolExecutor(max_workers=max(len(selected), 1)) as pool:
        return list(pool.map(_run_one, selected))


def cached_checks(max_age_s: float) -> tuple[dt.datetime, list[CheckResult]]:
    """(when it ran, results) of the last full run if younger than `max_age_s`, else of a new
    one (a single run at a time: concurrent callers wait for it and share its results)."""
    found = cache.get(CACHE_KEY)
    if found is None:
        with _refreshing:
            found = cache.get(CACHE_KEY)
            if found is None:
                found = remember(run_checks(), max_age_s)
    at, results = found
    return dt.datetime.fromisoformat(at), [CheckResult(**r) for r in results]


def remember(results: list[CheckResult], max_age_s: float) -> tuple[str, list[dict[str, object]]]:
    """Keep a full run's results for `cached_checks`; returns what was stored."""
    from django.utils import timezone

    stored = (timezone.now().isoformat(), [r.as_dict() for r in results])
    if max_age_s > 0:
        cache.set(CACHE_KEY, stored, timeout=max_age_s)
    return stored
