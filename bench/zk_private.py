"""A private, throwaway ZooKeeper for benchmarks, so a big synthetic cluster never lands in the
shared one (its small heap would not hold ~160,000 znodes, and other people use it).

    with PrivateZooKeeper() as zk:             # var/bench/zk/<port>/, a free loopback port
        client = new_client(zk.hosts)          # "127.0.0.1:<port>"
        ...
    # stopped (SIGTERM, SIGKILL after 15 s) and its folder deleted, also on Ctrl-C or an error

It is started as `scripts/services.sh` starts the demo's ZooKeeper, from the Debian package's jars
(`/usr/share/java/zookeeper.jar` + slf4j-log4j12 + log4j-1.2) with a generated zoo.cfg, but with
a larger heap (`heap`, default 1536m), `forceSync=no` (the transaction log is not fsynced: a
benchmark's data is thrown away, and fsyncs would make writing the cluster I/O bound) and a
snapshot only every 100,000 transactions. It runs in its own session, so a Ctrl-C in the
terminal reaches only the benchmark, which stops it in `stop()`; an `atexit` hook stops it too if
the caller forgot. Only the process this object started is ever signalled.

    .venv/bin/python bench/zk_private.py       # start one, print its address, stop on Enter
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["PrivateZooKeeper", "free_port"]

JARS = ("zookeeper.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")
JAVA_DIR = Path("/usr/share/java")
LOG4J = """\
log4j.rootLogger=WARN, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
"""


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def four_letter(port: int, command: str, timeout: float = 2.0) -> str:
    """ZooKeeper's answer to a four-letter command ("" if it does not answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(command.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class PrivateZooKeeper:
    """One standalone ZooKeeper on a free loopback port, with its data under `base/<port>`."""

    def __init__(
        self,
        base: Path = ROOT / "var" / "bench" / "zk",
        heap: str = "1536m",
        port: int | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.base = base
        self.heap = heap
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.home = base / str(self.port)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.home / "log" / "zookeeper.out"

    def _write_config(self) -> Path:
        conf, data, logs = self.home / "conf", self.home / "data", self.home / "log"
        for folder in (conf, data, logs):
            folder.mkdir(parents=True, exist_ok=True)
        (conf / "zoo.cfg").write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf",
                    "forceSync=no",
                    "snapCount=100000",
                    "preAllocSize=65536",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    "",
                ]
            )
        )
        (conf / "log4j.properties").write_text(LOG4J)
        return conf

    def start(self) -> PrivateZooKeeper:
        """Start it and wait until it serves (`srvr` says standalone)."""
        if self.process is not None:
            return self
        missing = [jar for jar in JARS if not (JAVA_DIR / jar).exists()]
        if missing or shutil.which("java") is None:
            raise RuntimeError(
                f"ZooKeeper's Debian package is needed (java, {', '.join(JARS)} in {JAVA_DIR})"
            )
        if four_letter(self.port, "ruok", timeout=0.5):
            raise RuntimeError(f"port {self.port} is already in use")
        conf = self._write_config()
        classpath = ":".join([*(str(JAVA_DIR / jar) for jar in JARS), str(conf)])
        command = [
            "java",
            "-Xms256m",
            f"-Xmx{self.heap}",
            f"-Dzookeeper.log.dir={self.home / 'log'}",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(conf / "zoo.cfg"),
        ]
        with self.log_file.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        atexit.register(self.stop)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if "Mode: standalone" in four_letter(self.port, "srvr", timeout=1.0):
                return self
            if self.process.poll() is not None:
                tail = self.log_file.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"ZooKeeper exited during start:\n{tail}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper not serving after {self.start_timeout_s:g} s")

    def stop(self, keep_data: bool = False) -> None:
        """Stop the process this object started (idempotent) and delete its folder."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        if not keep_data:
            shutil.rmtree(self.home, ignore_errors=True)
            with contextlib.suppress(OSError):  # only when no other private ZooKeeper uses it
                self.base.rmdir()

    def __enter__(self) -> PrivateZooKeeper:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def main() -> None:
    zk = PrivateZooKeeper().start()
    try:
        pid = zk.process.pid if zk.process else "?"
        print(f"private ZooKeeper on {zk.hosts} (pid {pid}, {zk.home}); Enter stops it")
        sys.stdin.readline()
    finally:
        zk.stop()


if __name__ == "__main__":
    main()
