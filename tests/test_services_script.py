"""scripts/services.sh: idempotent start, exact stop, and hands off what it did not start."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "services.sh"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(action: str, env: dict[str, str], *names: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), action, *names], env=env, capture_output=True, text=True, timeout=60
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def env(tmp_path):
    return {
        **os.environ,
        "VAR_DIR": str(tmp_path / "var"),
        "ZK_PORT": str(_free_port()),
        "REDIS_PORT": str(_free_port()),
        "STARTED_FILE": str(tmp_path / "started"),
    }


def test_start_is_idempotent_and_stop_ends_exactly_what_started(env, tmp_path):
    first = _run("start", env)
    assert first.returncode == 0, first.stderr
    assert f"zookeeper: up on 127.0.0.1:{env['ZK_PORT']}" in first.stdout
    assert f"redis: up on 127.0.0.1:{env['REDIS_PORT']}" in first.stdout
    pids = [
        int((tmp_path / "var" / "zookeeper" / "zk.pid").read_text()),
        int((tmp_path / "var" / "redis" / "redis.pid").read_text()),
    ]
    try:
        second = _run("start", env)
        assert second.returncode == 0, second.stderr
        assert "zookeeper: already running" in second.stdout
        assert "redis: already running" in second.stdout
        # Only the first start started anything; callers stop what they find in STARTED_FILE.
        assert (tmp_path / "started").read_text().split() == ["zookeeper", "redis"]
        assert "Mode: standalone" in _run("status", env).stdout
    finally:
        stopped = _run("stop", env)
    assert stopped.returncode == 0, stopped.stderr
    assert not any(_alive(pid) for pid in pids)
    assert "zookeeper: down" in _run("status", env).stdout


def test_it_refuses_a_port_that_something_else_holds(env):
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", int(env["REDIS_PORT"])))
        foreign.listen()
        done = _run("start", env, "redis")
        assert done.returncode != 0
        assert f"port {env['REDIS_PORT']} is in use by a process this script did not start" in (
            done.stderr
        )
        # The stop finds no pid of its own and signals nothing.
        assert "redis: not running" in _run("stop", env, "redis").stdout
        foreign.getsockname()  # still ours: nothing closed it
