"""The console's pages and /metrics at 1,000 tables x 16 partitions x 10 segments, served for real.

Setup (skipped with `--reuse-db` when the database already holds a mirror):

1. a private ZooKeeper (`bench/zk_private.py`: a free port, 1.5 GB heap, data under var/bench/zk,
   stopped and deleted at the end), or a fresh chroot of `--zk-hosts` (deleted at the end);
2. the synthetic cluster of `bench/synthetic.py` written into it (`--tables` x `--partitions` x
   `--segments`, replication 2 over 6 fake servers);
3. live state published to Redis (`tables.live_state.publish`, `--redis-url`, db 9 by default)
   for every consuming segment the IdealStates assign to each fake server: plausible offsets, lags
   and rates, with a seeded mix of lagging, stalled, erroring, offset-losing, committing, idle and
   silent partitions;
4. `tables.mirror.sync.sync_cluster` into a migrated SQLite database (`--db`,
   var/bench/pages.sqlite3):
   a full sync stamped two minutes ago, then the servers publish again (stalled partitions did not
   move) and an unchanged re-sync stamped now, so the verdicts include STALLED; the live-state
   keys written are deleted afterwards.

Every run then:

- replaces the ConsumptionSample rows of the detail table with one hour of samples ending now
  (one per partition every MIRROR_SAMPLE_SECONDS), bulk-inserted: syncing for an hour is not an
  option; samples of the other tables are only those the two syncs wrote;
- counts the SQL queries of each URL in-process (Django's test client, the same database);
- starts gunicorn (`console.wsgi`, 2 workers, a free port) with DEBUG off, a throwaway
  SECRET_KEY, DATABASE_URL = the bench database and ZK_HOSTS = 127.0.0.1:1, where nothing
  listens: a page that touched ZooKeeper would take seconds or fail;
- logs in through /login/ (CSRF token and session cookie, as a browser does) as the operator
  `bench`, then requests each URL `--warmup` times untimed and `--requests` times timed, one at
  a time: the overview, the tables list (default sort), the tables list sorted by lag on page 10,
  the detail page of `--detail-table` (charts included) and /metrics (no login); baselines
  `/healthz?check=database` (the whole middleware stack and one SQL round trip) and a static file
  (WhiteNoise);
- prints status, response size, query count, p50, p95 and max per URL and each URL's p50 as a
  multiple of the /healthz baseline's; gunicorn is stopped on exit, Ctrl-C or an error.

    .venv/bin/python bench/pages.py [--tables 1000] [--partitions 16] [--segments 10]
        [--reuse-db] [--db var/bench/pages.sqlite3] [--requests 50] [--warmup 3]
        [--detail-table synth0000_REALTIME] [--zk-hosts HOST:PORT] [--zk-heap 1536m]
        [--redis-url redis://127.0.0.1:16380/9] [--workers 2]

The database is kept for `--reuse-db` (delete it by hand, or run without the flag to rebuild it).
"""

from __future__ import annotations

import argparse
import http.client
import http.cookiejar
import math
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pages_cluster import CLUSTER, build_mirror, write_samples  # noqa: E402
from bench.zk_private import free_port  # noqa: E402

USERNAME = "bench"
UNREACHABLE_ZK = "127.0.0.1:1"
DEFAULT_DB = ROOT / "var" / "bench" / "pages.sqlite3"
GUNICORN_LOG = ROOT / "var" / "bench" / "pages-gunicorn.log"
BASELINE = "/healthz?check=database"
STATIC = "/static/console/console.css"

# --- settings shared by this process and gunicorn --------------------------------------------


def bench_env(db: Path, redis_url: str) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": f"sqlite:///{db}",
        "SECRET_KEY": secrets.token_urlsafe(40),
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "ZK_HOSTS": UNREACHABLE_ZK,
        "CLUSTER_NAME": CLUSTER,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "CELERY_RESULT_BACKEND": redis_url,
        "MIRROR_SYNC_ON_BEAT": "false",
        "LOG_LEVEL": "WARNING",
    }


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django

    django.setup()


def remove_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


# --- every run: user, query counts --------------------------------------------------------


def ensure_user() -> str:
    """The operator account `bench` with a new random password; returns the password."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from console import roles

    user, _ = get_user_model().objects.get_or_create(username=USERNAME)
    password = secrets.token_urlsafe(18)
    user.set_password(password)
    user.save()
    group = Group.objects.filter(name=roles.OPERATOR).first()
    if group is not None:
        user.groups.set([group])
    return password


def count_queries(urls: list[str]) -> dict[str, int]:
    """SQL queries per URL, rendered in-process with Django's test client (logged in)."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(username=USERNAME))
    counts = {}
    for url in urls:
        client.get(url)  # first render: caches, lazy imports
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{url}: status {response.status_code} in-process")
        counts[url] = len(captured.captured_queries)
    return counts


# --- serving and timing --------------------------------------------------------------------------


class Gunicorn:
    """`gunicorn console.wsgi` on a free loopback port, in its own session; `stop` ends it."""

    def __init__(self, env: dict[str, str], workers: int) -> None:
        self.port = free_port()
        self.env = {**os.environ, **env}
        self.workers = workers
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        GUNICORN_LOG.parent.mkdir(parents=True, exist_ok=True)
        command = [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "console.wsgi",
            "-b",
            f"127.0.0.1:{self.port}",
            "-w",
            str(self.workers),
            "--no-control-socket",  # the default path is shared by every gunicorn of the user
        ]
        with GUNICORN_LOG.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited; see {GUNICORN_LOG}")
            try:
                if get(self.port, BASELINE, accept="application/json").status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn not answering after {timeout_s:g} s; see {GUNICORN_LOG}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)  # the arbiter stops its workers
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: only what we started
            process.wait(timeout=10)


@dataclass
class Response:
    status: int
    size: int
    seconds: float
    location: str = ""


GZIP = " (gzip)"  # a URL ending so marked is asked for with Accept-Encoding: gzip


def get(port: int, url: str, cookie: str = "", accept: str = "text/html") -> Response:
    """One GET on a fresh connection, timed from connect to the last byte of the body (as sent:
    compressed when asked for gzip, as Prometheus asks for /metrics)."""
    headers = {"Accept": accept}
    if url.endswith(GZIP):
        url = url.removesuffix(GZIP)
        headers["Accept-Encoding"] = "gzip"
    if cookie:
        headers["Cookie"] = cookie
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("GET", url, headers=headers)
        response = connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        return Response(response.status, len(body), elapsed, response.getheader("Location") or "")
    finally:
        connection.close()


def login(base: str, password: str) -> str:
    """Log in through the form; returns the Cookie header of the session."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    html = opener.open(f"{base}/login/", timeout=60).read().decode()
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    if found is None:
        raise SystemExit("no CSRF token in /login/")
    form = urllib.parse.urlencode(
        {
            "username": USERNAME,
            "password": password,
            "csrfmiddlewaretoken": found.group(1),
            "next": "/ui/tables/",
        }
    ).encode()
    request = urllib.request.Request(
        f"{base}/login/", data=form, headers={"Referer": f"{base}/login/"}
    )
    opener.open(request, timeout=120).read()
    names = {c.name for c in jar}
    if "sessionid" not in names:
        raise SystemExit(f"login failed (cookies: {sorted(names)})")
    return "; ".join(f"{c.name}={c.value}" for c in jar)


@dataclass
class Timing:
    url: str
    label: str
    status: int
    size: int
    seconds: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p95(self) -> float:
        ordered = sorted(self.seconds)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def time_url(
    port: int, url: str, label: str, cookie: str, accept: str, warmup: int, requests: int
) -> Timing:
    for _ in range(warmup):
        get(port, url, cookie, accept)
    seconds, sizes, statuses = [], set(), set()
    for _ in range(requests):
        response = get(port, url, cookie, accept)
        if response.status != 200:
            raise SystemExit(f"{url}: status {response.status} {response.location}".strip())
        seconds.append(response.seconds)
        sizes.add(response.size)
        statuses.add(response.status)
    return Timing(url, label, statuses.pop(), max(sizes), seconds)


# --- main --------------------------------------------------------------------------------------


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def mirror_summary() -> tuple[int, int, int, int, str, dict[str, int]]:
    from django.db.models import Count
    from django.utils import timezone

    from tables.models import (
        ConsumptionSample,
        MirroredSegment,
        MirroredTable,
        MirrorState,
        PartitionStatus,
    )

    state = MirrorState.objects.filter(name="zk").first()
    age = "never synced"
    if state is not None and state.last_synced is not None:
        age = f"last synced {(timezone.now() - state.last_synced).total_seconds():.0f} s ago"
    verdicts = dict(
        PartitionStatus.objects.values_list("verdict").annotate(n=Count("id")).order_by("-n")
    )
    return (
        MirroredTable.objects.count(),
        PartitionStatus.objects.count(),
        MirroredSegment.objects.count(),
        ConsumptionSample.objects.count(),
        age,
        verdicts,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--reuse-db", action="store_true", help="skip the setup if --db has one")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--detail-table", default="synth0000_REALTIME")
    parser.add_argument("--zk-hosts", default="", help="an existing ZooKeeper (fresh chroot)")
    parser.add_argument("--zk-heap", default="1536m")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:16380/9")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminate)

    args.db = args.db.resolve()
    args.db.parent.mkdir(parents=True, exist_ok=True)
    reuse = args.reuse_db and args.db.exists()
    if not reuse:
        remove_db(args.db)
    env = bench_env(args.db, args.redis_url)
    setup_django(env)

    if reuse:
        print(f"reusing the mirror in {args.db} (setup skipped)")
    else:
        started = time.perf_counter()
        try:
            build_mirror(args)
        except BaseException:
            remove_db(args.db)  # half a mirror must not be reused
            raise
        print(f"setup total: {time.perf_counter() - started:.1f} s", flush=True)

    tables, partitions, segments, samples, age, verdicts = mirror_summary()
    print(
        f"mirror: {tables} tables, {partitions} partitions, {segments} segments, "
        f"{samples} samples; {age}"
    )
    print("verdicts: " + ", ".join(f"{v} {n}" for v, n in verdicts.items()))
    if tables == 0:
        raise SystemExit("the mirror is empty: run without --reuse-db")

    started = time.perf_counter()
    written, sampled = write_samples(args.detail_table)
    print(
        f"{args.detail_table}: {written} ConsumptionSample rows bulk-inserted for {sampled} "
        f"partitions (one hour, one per partition every MIRROR_SAMPLE_SECONDS; not from syncs) "
        f"in {time.perf_counter() - started:.1f} s"
    )
    password = ensure_user()

    detail = f"/ui/tables/{args.detail_table}/"
    pages = [
        ("/", "overview", True),
        ("/ui/tables/", "tables (default sort)", True),
        ("/ui/tables/?sort=-lag&page=10", "tables sorted by lag, page 10", True),
        (detail, "table detail", True),
        ("/metrics", "/metrics (no login)", False),
        ("/metrics" + GZIP, "/metrics gzipped, as Prometheus asks", False),
    ]
    baselines = [(BASELINE, "baseline: healthz database", False), (STATIC, "static file", False)]
    queries = count_queries([url for url, _, _ in pages if not url.endswith(GZIP)])

    from django.db import connections

    connections.close_all()
    server = Gunicorn(env, args.workers)
    results: list[Timing] = []
    try:
        started = time.perf_counter()
        server.start()
        print(
            f"gunicorn up on {server.base} with {args.workers} workers in "
            f"{time.perf_counter() - started:.1f} s (ZK_HOSTS={UNREACHABLE_ZK}, DEBUG off)"
        )
        started = time.perf_counter()
        cookie = login(server.base, password)
        print(f"logged in as {USERNAME} through /login/ in {time.perf_counter() - started:.1f} s")
        print(f"{args.warmup} warm-up + {args.requests} timed requests per URL, one at a time")
        for url, label, needs_login in baselines[:1] + pages + baselines[1:]:
            accept = "application/json" if url == BASELINE else "text/html"
            timing = time_url(
                server.port,
                url,
                label,
                cookie if needs_login else "",
                accept,
                args.warmup,
                args.requests,
            )
            results.append(timing)
            print(f"  {label}: p50 {timing.p50 * 1000:.1f} ms", flush=True)
    finally:
        server.stop()

    base = next(t for t in results if t.url == BASELINE).p50
    print()
    header = f"{'url':<38} {'bytes':>9} {'queries':>7} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}"
    print(header + f" {'p50/baseline':>12}")
    for t in results:
        count = str(queries[t.url]) if t.url in queries else "-"
        print(
            f"{t.url:<38} {t.size:>9} {count:>7} {t.p50 * 1000:>8.1f} {t.p95 * 1000:>8.1f} "
            f"{max(t.seconds) * 1000:>8.1f} {t.p50 / base:>11.1f}x"
        )
    print(f"baseline: {BASELINE} p50 {base * 1000:.1f} ms")


if __name__ == "__main__":
    main()
