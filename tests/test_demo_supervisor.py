"""`make demo`'s supervisor, for real: scripts/demo.sh on private ports and a private VAR_DIR (its
own ZooKeeper and Redis, never the test services or a developer's demo). A server killed with
SIGKILL is started again by supervisord (a new pid, its live instance back in ZooKeeper on a new
session) while the other programs keep their pids and the console keeps answering; ingestion goes
on (a segment commits after the restart) and `verify_ledger githubEvents --rows` is exact; Ctrl-C
(SIGINT to the script's process group, as a terminal sends it) then stops everything: nothing is
left."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tables.zk import codec
from tables.zk.client import new_client
from tables.zk.paths import ClusterPaths
from tests import envdefaults
from tests.poll import wait_until

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(sys.prefix)
RECOVERY_LOG = envdefaults.VAR_DIR / "artifacts" / "outage-recovery.txt"
PATHS = ClusterPaths("PinotCluster")
TABLE = "githubEvents_REALTIME"
PROGRAMS = [
    "core:beat",
    "core:controller",
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


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Demo:
    """scripts/demo.sh in a session of its own, with supervisorctl on its configuration."""

    def __init__(self, tmp_path: Path) -> None:
        self.var = tmp_path / "var"
        zk, redis, web, controller, s1, s2, s3 = _free_ports(7)
        self.zk_hosts = f"127.0.0.1:{zk}"
        self.web = f"http://127.0.0.1:{web}"
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
            "SERVER1_PORT": str(s1),
            "SERVER2_PORT": str(s2),
            "SERVER3_PORT": str(s3),
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

    def output(self) -> str:
        return self.out.read_text(errors="replace")[-4000:]

    def ctl(self, *args: str) -> str:
        done = subprocess.run(
            [str(VENV / "bin" / "supervisorctl"), "-c", str(self.var / "supervisord.conf"), *args],
            capture_output=True,
            text=True,
            timeout=30,
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

    def login_page(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.web}/login/", timeout=10) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def verify_ledger(self) -> subprocess.CompletedProcess:
        """`manage.py verify_ledger githubEvents --rows` against this demo's stores."""
        env = {
            **self.env,
            "ZK_HOSTS": self.zk_hosts,
            "REDIS_URL": f"redis://127.0.0.1:{self.env['REDIS_PORT']}/0",
            "SECRET_KEY_FILE": str(self.var / "secret_key"),
            "DATABASE_URL": f"sqlite:///{self.var / 'db.sqlite3'}",
        }
        command = [str(VENV / "bin" / "python"), "manage.py", "verify_ledger", "githubEvents"]
        return subprocess.run(
            [*command, "--rows"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )

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


def _done_segments(zk) -> set[str]:
    """The demo table's DONE segments, from their ZooKeeper metadata."""
    folder = PATHS.segments(TABLE)
    if not zk.exists(folder):
        return set()
    done = set()
    for name in zk.get_children(folder):
        data, _ = zk.get(f"{folder}/{name}")
        if codec.decode(data).simple_fields.get("segment.realtime.status") == "DONE":
            done.add(name)
    return done


def test_a_killed_server_is_restarted_and_ctrl_c_leaves_nothing(demo):
    before = wait_until(demo.pids, timeout=150, interval=0.5, what="every program RUNNING")
    assert demo.services_up()
    zk = new_client(demo.zk_hosts)
    try:
        live = PATHS.liveinstance(demo.server1)
        first = wait_until(lambda: zk.exists(live), timeout=60, interval=0.2, what="server1 live")
        wait_until(demo.login_page, timeout=60, interval=0.5, what="the console answers")

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

        # Ingestion goes on with no one acting: a segment commits after the restart, and every
        # row committed so far is in exactly one segment.
        done = _done_segments(zk)
        wait_until(
            lambda: _done_segments(zk) - done, timeout=120, interval=1, what="a commit after"
        )
        RECOVERY_LOG.parent.mkdir(parents=True, exist_ok=True)
        with RECOVERY_LOG.open("a") as out:  # a figure for the notes; nothing asserts on it
            out.write(f"server SIGKILL under supervisord: back {back_at - killed_at:.1f} s, ")
            out.write(f"next commit {time.monotonic() - back_at:.1f} s after it was back\n")
        ledger = demo.verify_ledger()
        assert ledger.returncode == 0, ledger.stdout + ledger.stderr
        assert ": ok:" in ledger.stdout and "PROBLEM" not in ledger.stdout, ledger.stdout
    finally:
        zk.stop()
        zk.close()

    assert demo.interrupt() in (0, 130), demo.output()
    assert demo.leftovers() == []
    output = demo.output()
    assert "redis: stopped" in output and "zookeeper: stopped" in output
    assert not (demo.var / "supervisor.sock").exists()
