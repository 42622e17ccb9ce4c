"""`make demo`'s supervisor, for real: scripts/demo.sh on private ports and a private VAR_DIR (its
own ZooKeeper and Redis, never the test services or a developer's demo). Both controllers run, are
live, answer `GET /health` on their own ports and each masters partitions of leadControllerResource.
A server killed with SIGKILL is started again by supervisord (a new pid, its live instance back in
ZooKeeper on a new session) while the other programs keep their pids and the console keeps
answering. The controller leading the demo table, restarted through supervisorctl, stops on SIGTERM
within its stopwaitsecs (exit status 0, never SIGKILL) and comes back live, mastering partitions
again. Ingestion goes on (a segment commits after both restarts), and the second demo table,
githubEventsPauseless (pauseless consumption on the same topic), ingests too: it has committed
segments, and a CONSUMING segment of each partition started before its predecessor was DONE
(pauseless: the next segment consumes while the last one is built). Every committed segment's
download URL is one of the two controllers' own URLs (each runs with its own VIP URL) and
`verify_ledger <table> --rows` is exact for both tables; Ctrl-C (SIGINT to the script's process
group, as a terminal sends it) then stops everything, both controllers with exit status 0: nothing
is left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, lead_partition, partition_name
from tables.zk import codec
from tables.zk.client import new_client
from tables.zk.paths import ClusterPaths
from tests import envdefaults
from tests.poll import wait_until
from tests.ports import free_ports

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(sys.prefix)
RECOVERY_LOG = envdefaults.VAR_DIR / "artifacts" / "outage-recovery.txt"
PATHS = ClusterPaths("PinotCluster")
TABLE = "githubEvents_REALTIME"
PAUSELESS = "githubEventsPauseless_REALTIME"  # the second demo table, on the same topic
PROGRAMS = [
    "core:beat",
    "core:controller",
    "core:controller2",
    "core:spark",
    "core:web",
    "core:worker",
    "ingest:producer",
    "ingest:server1",
    "ingest:server2",
    "ingest:server3",
]


def _alive(pid: int) -> bool:
    """Running: not gone, and not a zombie waiting for its parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


class Demo:
    """scripts/demo.sh in a session of its own, with supervisorctl on its configuration."""

    def __init__(self, tmp_path: Path) -> None:
        self.var = tmp_path / "var"
        zk, redis, web, controller, controller2, s1, s2, s3, prom, am = free_ports(10)
        self.zk_hosts = f"127.0.0.1:{zk}"
        self.web = f"http://127.0.0.1:{web}"
        # program -> (its participant, its URL)
        self.controllers = {
            name: (f"Controller_127.0.0.1_{port}", f"http://127.0.0.1:{port}")
            for name, port in (("controller", controller), ("controller2", controller2))
        }
        self.server1 = f"Server_127.0.0.1_{s1}"
        # A clean environment: nothing of the test session's settings (ZK_HOSTS, REDIS_URL,
        # DATABASE_URL ... of the shared test services) may reach the demo.
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            "VENV": str(VENV),
            "DEMO_ENV_FILE": "",
            "VAR_DIR": str(self.var),
            "ZK_PORT": str(zk),
            "REDIS_PORT": str(redis),
            "WEB_PORT": str(web),
            "CONTROLLER_PORT": str(controller),
            "CONTROLLER2_PORT": str(controller2),
            "SERVER1_PORT": str(s1),
            "SERVER2_PORT": str(s2),
            "SERVER3_PORT": str(s3),
            "PROMETHEUS_PORT": str(prom),  # alerting starts where installed, on free ports
            "ALERTMANAGER_PORT": str(am),
            "DEMO_PRODUCE_RATE": "5",
            "SPARK_MASTER": "local[1]",
        }
        self.out = tmp_path / "demo.out"
        self.proc: subprocess.Popen | None = None
        self.service_pids: list[int] = []

    def start(self) -> None:
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(ROOT / "scripts" / "demo.sh")],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"demo.sh exited with {self.proc.returncode}:\n{self.output()}")

    def output(self, since: int | None = None) -> str:
        """The script's output (supervisord's log included): its end, or all of it from `since`."""
        text = self.out.read_text(errors="replace")
        return text[-4000:] if since is None else text[since:]

    def output_size(self) -> int:
        return len(self.out.read_text(errors="replace"))

    def ctl(self, *args: str, timeout: float = 30) -> str:
        done = subprocess.run(
            [str(VENV / "bin" / "supervisorctl"), "-c", str(self.var / "supervisord.conf"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return done.stdout

    def states(self) -> dict[str, tuple[str, int]]:
        """program -> (state, pid) as supervisorctl reports them; {} before supervisord runs."""
        self.check_alive()
        if not (self.var / "supervisor.sock").exists():
            return {}
        found = {}
        for line in self.ctl("status").splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[0] in PROGRAMS:
                pid = int(fields[3].rstrip(",")) if fields[1] == "RUNNING" else 0
                found[fields[0]] = (fields[1], pid)
        return found

    def services_up(self) -> bool:
        files = [self.var / "zookeeper" / "zk.pid", self.var / "redis" / "redis.pid"]
        if all(f.is_file() and f.read_text().strip() for f in files):
            self.service_pids = [int(f.read_text()) for f in files]
        return bool(self.service_pids)

    def pids(self) -> dict[str, int]:
        states = self.states()
        running = {name: pid for name, (state, pid) in states.items() if state == "RUNNING"}
        return running if len(running) == len(PROGRAMS) else {}

    def controller_answers(self, url: str) -> bool:
        """Pinot's `GET /health` on a controller's own port: 200 (its ZooKeeper session is up)."""
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def login_page(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.web}/login/", timeout=10) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def verify_ledgers(self, *tables: str) -> dict[str, tuple[int, str]]:
        """`manage.py verify_ledger <table> --rows` of each table against this demo's stores, all
        at once: table -> (exit status, output)."""
        env = {
            **self.env,
            "ZK_HOSTS": self.zk_hosts,
            "REDIS_URL": f"redis://127.0.0.1:{self.env['REDIS_PORT']}/0",
            "SECRET_KEY_FILE": str(self.var / "secret_key"),
            "DATABASE_URL": f"sqlite:///{self.var / 'db.sqlite3'}",
        }
        command = [str(VENV / "bin" / "python"), "manage.py", "verify_ledger"]
        running = {
            table: subprocess.Popen(
                [*command, table, "--rows"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for table in tables
        }
        done = {}
        for table, proc in running.items():
            try:
                out, _ = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            done[table] = (proc.returncode, out)
        return done

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT to the script's process group; its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(timeout=150)

    def leftovers(self) -> list[str]:
        """Processes whose environment carries this demo's VAR_DIR (every process it started)."""
        marker = f"\0VAR_DIR={self.var}\0".encode()
        left = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = b"\0" + (entry / "environ").read_bytes()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if marker in environ or str(self.var).encode() in cmdline:
                command = cmdline.replace(b"\0", b" ").decode(errors="replace")
                left.append(f"{entry.name}: {command[:200]}")
        # Redis rewrites its process title over its environment: its pid file says who it was.
        left.extend(f"{pid}: a service" for pid in self.service_pids if _alive(pid))
        return left


@pytest.fixture
def demo(tmp_path) -> Iterator[Demo]:
    running = Demo(tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.interrupt()
        # Should the test have failed half-way, nothing may outlive it either.
        for line in running.leftovers():
            pid = int(line.split(":")[0])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _segments(zk, table: str = TABLE) -> dict[str, dict[str, str]]:
    """A demo table's segments: name -> the simple fields of their ZooKeeper metadata."""
    folder = PATHS.segments(table)
    if not zk.exists(folder):
        return {}
    found = {}
    for name in zk.get_children(folder):
        data, _ = zk.get(f"{folder}/{name}")
        found[name] = codec.decode(data).simple_fields
    return found


def _done_segments(zk, table: str = TABLE) -> set[str]:
    """A demo table's DONE segments."""
    segments = _segments(zk, table)
    return {n for n, f in segments.items() if f.get("segment.realtime.status") == "DONE"}


def _consumed_while_committing(zk) -> list[str]:
    """The pauseless table's segments created before their predecessor's commit ended: Pinot
    creates the next segment at commit start, so its creation time precedes the DONE segment's
    last change (commit end); a standard commit creates it only after that."""
    segments = _segments(zk, PAUSELESS)
    folder = PATHS.segments(PAUSELESS)
    early = []
    for name in _done_segments(zk, PAUSELESS):
        table, partition, sequence, _ = name.split("__")
        following = [
            n for n in segments if n.startswith(f"{table}__{partition}__{int(sequence) + 1}__")
        ]
        done_at = zk.exists(f"{folder}/{name}").mtime
        if following and int(segments[following[0]]["segment.creation.time"]) < done_at:
            early.append(following[0])
    return early


def _masters(zk) -> dict[str, list[str]]:
    """leadControllerResource's EXTERNALVIEW: controller -> the partitions it is MASTER of."""
    path = PATHS.externalview(LEAD_CONTROLLER_RESOURCE)
    if not zk.exists(path):
        return {}
    masters: dict[str, list[str]] = {}
    for partition, states in codec.decode(zk.get(path)[0]).map_fields.items():
        for instance, state in states.items():
            if state == "MASTER":
                masters.setdefault(instance, []).append(partition)
    return masters


def _controllers_lead(demo: Demo, zk) -> bool:
    """Both controllers live, answering on their own ports, each MASTER of some partitions."""
    masters = _masters(zk)
    return all(
        zk.exists(PATHS.liveinstance(instance))
        and demo.controller_answers(url)
        and masters.get(instance)
        for instance, url in demo.controllers.values()
    )


def _table_leader(zk) -> str:
    """The controller that is MASTER of the demo table's partition of leadControllerResource."""
    mine = partition_name(lead_partition(TABLE.removesuffix("_REALTIME")))
    return next((c for c, parts in _masters(zk).items() if mine in parts), "")


def _restart_table_leader(demo: Demo, zk, pids: dict[str, int]) -> tuple[str, float]:
    """`supervisorctl restart` the demo table's lead controller: stopped by SIGTERM (exit status
    0, never SIGKILL), started again, live on a new session and leading again. Its program name
    and how long it took."""
    leader = wait_until(lambda: _table_leader(zk), timeout=60, interval=0.5, what="a table leader")
    program = next(name for name, (instance, _) in demo.controllers.items() if instance == leader)
    session = zk.exists(PATHS.liveinstance(leader)).ephemeralOwner
    mark, started = demo.output_size(), time.monotonic()
    demo.ctl("restart", f"core:{program}", timeout=180)

    def back() -> bool:
        pid = demo.states().get(f"core:{program}", ("", 0))[1]
        stat = zk.exists(PATHS.liveinstance(leader))
        return (
            pid not in (0, pids[f"core:{program}"])
            and bool(stat and stat.ephemeralOwner != session)
            and _controllers_lead(demo, zk)
        )

    wait_until(back, timeout=120, interval=0.5, what=f"{program} restarted and leading again")
    took = time.monotonic() - started
    assert f"stopped: {program} (exit status 0)" in demo.output(mark), demo.output()
    return program, took


def test_a_killed_server_and_a_stopped_controller_restart_and_ctrl_c_leaves_nothing(demo):
    before = wait_until(demo.pids, timeout=150, interval=0.5, what="every program RUNNING")
    assert demo.services_up()
    zk = new_client(demo.zk_hosts)
    try:
        live = PATHS.liveinstance(demo.server1)
        first = wait_until(lambda: zk.exists(live), timeout=60, interval=0.2, what="server1 live")
        wait_until(demo.login_page, timeout=60, interval=0.5, what="the console answers")
        wait_until(lambda: _controllers_lead(demo, zk), timeout=90, interval=0.5, what="both lead")
        for name, (instance, _) in demo.controllers.items():  # each logs to its own file
            assert instance in (demo.var / "log" / f"{name}.log").read_text(errors="replace")

        os.kill(before["ingest:server1"], signal.SIGKILL)
        killed_at = time.monotonic()

        def restarted() -> bool:
            assert demo.login_page(), "the console stopped answering while server1 restarted"
            pid = demo.states().get("ingest:server1", ("", 0))[1]
            stat = zk.exists(live)
            return pid not in (0, before["ingest:server1"]) and bool(
                stat and stat.ephemeralOwner != first.ephemeralOwner
            )

        wait_until(restarted, timeout=90, interval=0.5, what="server1 restarted and live again")
        back_at = time.monotonic()
        after = demo.pids()
        assert after["ingest:server1"] != before["ingest:server1"]
        assert {n: p for n, p in after.items() if n != "ingest:server1"} == {
            n: p for n, p in before.items() if n != "ingest:server1"
        }, "only the killed program was restarted"
        assert "exited: server1 (terminated by SIGKILL; not expected)" in demo.output()

        # The table's lead controller, stopped gracefully and started again by supervisord.
        program, controller_s = _restart_table_leader(demo, zk, after)
        now = wait_until(demo.pids, timeout=60, interval=0.5, what="every program RUNNING")
        assert {n: p for n, p in now.items() if n != f"core:{program}"} == {
            n: p for n, p in after.items() if n != f"core:{program}"
        }, "only the restarted controller has a new pid"

        # Ingestion goes on with no one acting: a segment commits after the restarts, and every
        # row committed so far is in exactly one segment.
        done, back_at = _done_segments(zk), time.monotonic()
        wait_until(
            lambda: _done_segments(zk) - done, timeout=120, interval=1, what="a commit after"
        )
        RECOVERY_LOG.parent.mkdir(parents=True, exist_ok=True)
        with RECOVERY_LOG.open("a") as out:  # figures for the notes; nothing asserts on them
            out.write(f"server SIGKILL under supervisord: back {back_at - killed_at:.1f} s; ")
            out.write(f"lead controller restarted (SIGTERM) and leading in {controller_s:.1f} s, ")
            out.write(f"next commit {time.monotonic() - back_at:.1f} s after that\n")
        # The pauseless table ingests the same topic: committed segments, and the next segment of
        # a partition created at the commit's start, before its predecessor was DONE.
        wait_until(
            lambda: _consumed_while_committing(zk), timeout=60, interval=1, what="pauseless commits"
        )
        # Each controller commits under its own VIP URL, never a default or another's.
        urls = tuple(f"{url}/segments/" for _, url in demo.controllers.values())
        for table in (TABLE, PAUSELESS):
            done_urls = {
                name: fields.get("segment.download.url", "")
                for name, fields in _segments(zk, table).items()
                if fields.get("segment.realtime.status") == "DONE"
            }
            wrong = {name: url for name, url in done_urls.items() if not url.startswith(urls)}
            assert done_urls and wrong == {}, f"{table}: download URLs outside {urls}: {wrong}"
        for table, (status, out) in demo.verify_ledgers(TABLE, PAUSELESS).items():
            assert status == 0, (table, out)
            assert ": ok:" in out and "PROBLEM" not in out, (table, out)
    finally:
        zk.stop()
        zk.close()

    mark = demo.output_size()
    assert demo.interrupt() in (0, 130), demo.output()
    assert demo.leftovers() == []
    output = demo.output()
    assert "redis: stopped" in output and "zookeeper: stopped" in output
    assert not (demo.var / "supervisor.sock").exists()
    stopping = demo.output(mark)
    for name in demo.controllers:  # each handed over within stopwaitsecs: no SIGKILL
        assert f"stopped: {name} (exit status 0)" in stopping, stopping
