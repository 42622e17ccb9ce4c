"""Real Celery processes for tests: started as `make demo` starts them, stopped by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from console.celery import app
from tables.zk.client import new_client
from tests.poll import wait_until

WORKER = ["worker", "--loglevel", "INFO", "--without-mingle", "--without-gossip"]


class CeleryProcesses:
    """A default-queue worker (2 processes), a spark-queue worker (1 process) and beat."""

    def __init__(self, log_dir: Path, zk_root_hosts: str) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.host = f"test-{os.getpid()}"
        # The workers live for the whole session, so they get a ZooKeeper chroot of their own;
        # tests that use them share it through the `worker_zk` fixture, which empties it after each.
        self.zk_root_hosts = zk_root_hosts
        self.zk_chroot = f"/celery-{uuid.uuid4().hex[:12]}"
        self.zk_hosts = zk_root_hosts + self.zk_chroot

    def _spawn(self, name: str, args: list[str]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{name}.log").open("wb")
        cmd = [sys.executable, "-m", "celery", "-A", "console", *args]
        # Workers use the test runner's database (a file), not the dev one.
        env = {
            **os.environ,
            "DATABASE_URL": os.environ["DATABASE_TEST_URL"],
            "ZK_HOSTS": self.zk_hosts,
            "FAULT_INJECTION_DIR": str(Path(os.environ["VAR_DIR"]) / "faults"),  # armed by tests
        }
        self.procs[name] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def start(self) -> None:
        root = new_client(self.zk_root_hosts)
        root.ensure_path(self.zk_chroot)
        root.stop()
        root.close()
        var = Path(os.environ["VAR_DIR"])
        for stale in ("celerybeat.pid", "celerybeat-schedule"):
            (var / stale).unlink(missing_ok=True)
        self._spawn("worker", [*WORKER, "-Q", "celery", "-c", "2", "-n", f"worker@{self.host}"])
        self._spawn("spark", [*WORKER, "-Q", "spark", "-c", "1", "-n", f"spark@{self.host}"])
        beat = ["beat", "--loglevel", "INFO", "--schedule", str(var / "celerybeat-schedule")]
        self._spawn("beat", [*beat, "--pidfile", str(var / "celerybeat.pid")])
        names = [f"worker@{self.host}", f"spark@{self.host}"]
        wait_until(lambda: self._all_answer(names), timeout=60, what=f"workers {names} answer")

    def _all_answer(self, names: list[str]) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                log = (self.log_dir / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"celery {name} exited with {proc.returncode}:\n{log}")
        replies = app.control.ping(destination=names, timeout=0.5)
        return {name for reply in replies for name in reply} == set(names)

    def child_pids(self, name: str) -> set[int]:
        """The pool processes of worker `name` (its main process's children)."""
        tasks = Path(f"/proc/{self.procs[name].pid}/task")
        return {
            int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()
        }

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        root = new_client(self.zk_root_hosts)
        root.delete(self.zk_chroot, recursive=True)
        root.stop()
        root.close()
