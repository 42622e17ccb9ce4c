"""scripts/services.sh: idempotent start, exact stop, and hands off what it did not start; its Redis
keeps the embedded stream in an append-only file fsynced on every write, so a SIGKILL loses no row
the producer was told had been written; its PostgreSQL is started only by name, initialised once
and keeps its data across a restart."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
import redis

from tables.streams.base import StreamError
from tables.streams.producer import Producer
from tables.streams.redis_streams import RedisTopicAdmin
from tests import envdefaults
from tests.poll import wait_until
from tests.ports import free_port

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "services.sh"


def _run(action: str, env: dict[str, str], *names: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), action, *names], env=env, capture_output=True, text=True, timeout=60
    )


def _alive(pid: int) -> bool:
    """Running: not gone, and not a zombie waiting for its parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.fixture
def env(tmp_path):
    return {
        **os.environ,
        "VAR_DIR": str(tmp_path / "var"),
        "ZK_PORT": str(free_port()),
        "REDIS_PORT": str(free_port()),
        "PG_PORT": str(free_port()),
        "PG_FSYNC": "off",
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


@pytest.mark.parametrize(("name", "port"), [("redis", "REDIS_PORT"), ("postgres", "PG_PORT")])
def test_it_refuses_a_port_that_something_else_holds(env, name, port):
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", int(env[port])))
        foreign.listen()
        done = _run("start", env, name)
        assert done.returncode != 0
        assert f"port {env[port]} is in use by a process this script did not start" in done.stderr
        # The stop finds no pid of its own and signals nothing.
        assert f"{name}: not running" in _run("stop", env, name).stdout
        foreign.getsockname()  # still ours: nothing closed it


@pytest.fixture
def pg_env(env):
    """`env` with VAR_DIR under var/test: as root the server runs as the `postgres` user, which
    cannot enter pytest's private tmp_path."""
    var = envdefaults.VAR_DIR / f"services-{uuid.uuid4().hex[:10]}"
    var.mkdir(parents=True)
    try:
        yield {**env, "VAR_DIR": str(var)}
    finally:
        _run("stop", {**env, "VAR_DIR": str(var)}, "postgres")
        shutil.rmtree(var, ignore_errors=True)


def _pg(env: dict[str, str]) -> psycopg.Connection:
    return psycopg.connect(
        host="127.0.0.1", port=int(env["PG_PORT"]), user="postgres", dbname="postgres"
    )


def test_postgres_starts_only_by_name_and_keeps_its_data_across_a_restart(pg_env, tmp_path):
    default = _run("start", pg_env, "redis")  # as `start` with no names would: no postgres
    assert default.returncode == 0, default.stderr
    assert "postgres: down" in _run("status", pg_env).stdout
    first = _run("start", pg_env, "postgres")
    assert first.returncode == 0, first.stderr
    assert f"postgres: up on 127.0.0.1:{pg_env['PG_PORT']}" in first.stdout
    pid = int((Path(pg_env["VAR_DIR"]) / "postgres" / "postgres.pid").read_text())
    assert "already running" in _run("start", pg_env, "postgres").stdout
    assert (tmp_path / "started").read_text().split() == ["redis", "postgres"]
    with _pg(pg_env) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (7)")

    stopped = _run("stop", pg_env)  # no names: everything with a pid file of ours
    assert stopped.returncode == 0, stopped.stderr
    assert f"postgres: stopped (pid {pid})" in stopped.stdout
    assert not _alive(pid)
    again = _run("start", pg_env, "postgres")
    assert again.returncode == 0, again.stderr
    with _pg(pg_env) as conn:  # the same cluster, not a fresh initdb
        assert conn.execute("SELECT n FROM kept").fetchall() == [(7,)]


def _redis(env: dict[str, str]) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=int(env["REDIS_PORT"]), socket_timeout=5)


def test_redis_keeps_every_acknowledged_row_across_sigkill(env, tmp_path):
    started = _run("start", env, "redis")
    assert started.returncode == 0, started.stderr
    pidfile = tmp_path / "var" / "redis" / "redis.pid"
    client = _redis(env)
    try:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "always"}
        assert client.config_get("dir") == {"dir": str(tmp_path / "var" / "redis")}
        admin = RedisTopicAdmin(client, key_prefix="aof:")
        admin.create_topic("rows", 4)
        producer = Producer(admin, "rows", 4, rate=3000, count=12_000, batch_size=50)
        producer.retry_cap_s = 0.5
        ended: list[BaseException] = []

        def produce() -> None:
            try:
                producer.run({"n": i} for i in itertools.count())
            except (StreamError, redis.RedisError) as exc:
                ended.append(exc)

        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        wait_until(lambda: producer.stats.rows >= 3000, timeout=60, what="3000 rows acknowledged")
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGKILL)  # the Redis this test started, in the middle of the writes
        before_kill = producer.stats.rows  # nothing is acknowledged until Redis is back
        wait_until(lambda: not _alive(pid), timeout=30, what=f"redis pid {pid} gone")

        again = _run("start", env, "redis")
        assert again.returncode == 0, again.stderr
        assert "redis: up" in again.stdout
        assert (tmp_path / "var" / "redis" / "appendonlydir").is_dir()
        # The producer retries through the outage and goes on once Redis is back (or ends on an
        # error it does not retry): either way `stats` counts exactly the acknowledged rows.
        writer.join(timeout=120)
        assert not writer.is_alive()
        acknowledged = producer.stats.rows
        assert acknowledged >= before_kill

        reader = RedisTopicAdmin(_redis(env), key_prefix="aof:").provider("rows")
        keys: list[int] = []
        for partition in range(4):
            latest = reader.latest_offset(partition)
            batch = reader.fetch(partition, 1, latest, timeout_ms=0)
            assert not batch.data_loss
            assert [m.offset for m in batch.messages] == list(range(1, latest))
            keys.extend(json.loads(m.value)["__key"] for m in batch.messages)
        # Every row the producer was told had been written is there, once: none lost by the kill.
        assert len(keys) == len(set(keys))
        assert set(range(acknowledged)) <= set(keys)
    finally:
        stopped = _run("stop", env, "redis")
    assert stopped.returncode == 0, stopped.stderr
