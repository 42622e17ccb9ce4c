"""The processes and ZooKeeper reads of `bench/failover.py`.

`FailoverStack` is `bench.chaos_stack.ChaosStack` (a private ZooKeeper and Redis from
scripts/services.sh on free ports, the spark-queue Celery worker that builds every segment, the
default-queue worker for the healing runs a new leader asks for, three servers and a producer)
with three controllers instead of one (`controller0..2`, each `run_controller --port P` on a free
port) and no Celery beat. Every process logs to `<run dir>/logs/failover-<name>.log`. Django
must be set up (with the private stores' addresses) before this module is imported.

The reads answer from ZooKeeper as the bench's own client sees it:
- `lead_masters`: each leadControllerResource partition's MASTER in its EXTERNALVIEW, with the
  view's mtime (ZooKeeper's clock: the moment of the write that made it so, or a later one);
- `segment_states`: each segment of a table with its status, start offset and the metadata
  znode's mtime (when a segment turned DONE, that is the commit's moment in ZooKeeper);
- `negotiated_timeout_ms`: the session timeout ZooKeeper grants a new client asking for
  ZK_TIMEOUT_SECONDS (every process of the stack asks for the same): kazoo keeps the requested
  value in `_session_timeout` and only logs the negotiated one (at its BLATHER level) when the
  session is created, so the log record is where it is read;
- `session_expiry`: ZooKeeper's own log line for a session's expiry ("Expiring session 0x..,
  timeout of N ms exceeded"): when it happened and the timeout that session had negotiated;
- `zookeeper_conf`: tickTime and the min/max session timeouts from the `conf` command.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.chaos_stack import ChaosStack
from tables.cluster.context import ClusterContext
from tables.domain.lead_assignment import masters_of
from tables.domain.leadership import DEFAULT_NUM_PARTITIONS, LEAD_CONTROLLER_RESOURCE
from tables.domain.segment_metadata import START_OFFSET, STATUS, SegmentStatus
from tables.zk.client import new_client
from tables.zk.errors import NoNode
from tables.zk.records import read_record
from tests.ingest_cluster import HOST, free_port

__all__ = [
    "FailoverStack",
    "SegmentState",
    "done",
    "done_after",
    "lead_masters",
    "negotiated_timeout_ms",
    "segment_states",
    "session_expiry",
    "zookeeper_conf",
]

CONTROLLERS = 3


class FailoverStack(ChaosStack):
    """Three controllers, three servers, the two Celery workers and a producer (no beat)."""

    def __init__(
        self, run_dir: Path, zk_port: int, redis_port: int, topic: str, rate: float, partitions: int
    ) -> None:
        super().__init__(run_dir, zk_port, redis_port, topic, rate)
        self.log_prefix = "failover"
        self.partitions = partitions
        self.host = f"failover-{os.getpid()}"
        self.worker_names = [f"worker@{self.host}", f"spark@{self.host}"]
        self.failover_ports = [free_port() for _ in range(CONTROLLERS)]

    def controller(self, index: int) -> str:
        return f"Controller_{HOST}_{self.failover_ports[index]}"

    def start_controller_at(self, index: int) -> None:
        args = ["run_controller", "--port", str(self.failover_ports[index]), "--interval", "0.5"]
        self._spawn(f"controller{index}", args)

    def start(self) -> None:
        """The stores must be up already (`_services("start")`)."""
        self.start_spark_worker()
        self.start_default_worker()
        for index in range(CONTROLLERS):
            self.start_controller_at(index)
        for index in range(3):
            self.start_server(index)

    def kill_controller(self, index: int) -> None:
        proc = self.procs[f"controller{index}"]
        proc.kill()
        proc.wait(timeout=30)

    @property
    def zookeeper_log(self) -> Path:
        return self.var_dir / "zookeeper" / "log" / "zookeeper.out"


# --- leadControllerResource ---------------------------------------------------------------------


def lead_masters(ctx: ClusterContext) -> tuple[int, dict[int, str | None], int]:
    """(number of partitions, partition -> MASTER in the EXTERNALVIEW, the view's mtime ms)."""
    ideal = read_record(ctx.client, ctx.paths.idealstate(LEAD_CONTROLLER_RESOURCE))
    fields = ideal.record.simple_fields if ideal is not None else {}
    count = int(fields.get("NUM_PARTITIONS", DEFAULT_NUM_PARTITIONS))
    view = read_record(ctx.client, ctx.paths.externalview(LEAD_CONTROLLER_RESOURCE))
    if view is None:
        return count, dict.fromkeys(range(count)), 0
    return count, masters_of(view.record, count), view.mtime_ms


# --- segments -----------------------------------------------------------------------------------


def _segment_names(ctx: ClusterContext, table: str) -> list[str]:
    try:
        return ctx.client.get_children(ctx.paths.segments(table))
    except NoNode:
        return []


@dataclass(frozen=True)
class SegmentState:
    status: str | None
    start_offset: int | None
    mtime_ms: int


def segment_states(ctx: ClusterContext, table: str) -> dict[str, SegmentState]:
    """Segment -> its status, start offset and metadata mtime, as ZooKeeper has them now."""
    out = {}
    for segment in _segment_names(ctx, table):
        found = read_record(ctx.client, ctx.paths.segment(table, segment))
        if found is None:
            continue
        fields = found.record.simple_fields
        start = fields.get(START_OFFSET)
        out[segment] = SegmentState(
            fields.get(STATUS), int(start) if start and start.isdigit() else None, found.mtime_ms
        )
    return out


def done_after(
    states: dict[str, SegmentState], since_ms: float, done_before: set[str]
) -> dict[str, int]:
    """Segment -> mtime ms, for the DONE segments not in `done_before` whose metadata was written
    after `since_ms`: those that turned DONE since then."""
    return {
        s: st.mtime_ms
        for s, st in states.items()
        if st.status == SegmentStatus.DONE and s not in done_before and st.mtime_ms > since_ms
    }


def done(states: dict[str, SegmentState]) -> set[str]:
    return {s for s, st in states.items() if st.status == SegmentStatus.DONE}


# --- session timeouts ---------------------------------------------------------------------------

BLATHER = 5  # kazoo's most verbose log level


class _SessionCreated(logging.Handler):
    """Keeps the negotiated timeout of kazoo's "Session created" log record."""

    def __init__(self) -> None:
        super().__init__(level=BLATHER)
        self.timeouts: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Session created") and len(record.args or ()) >= 3:
            self.timeouts.append(int(record.args[2]))


def negotiated_timeout_ms(hosts: str, requested_s: float) -> int:
    """Connect a new client asking for `requested_s` and return the session timeout ZooKeeper
    granted it (ms)."""
    logger = logging.getLogger("kazoo.client")
    handler = _SessionCreated()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(BLATHER)
    logger.propagate = False
    try:
        client = new_client(hosts, requested_s)
        client.stop()
        client.close()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    if not handler.timeouts:
        raise RuntimeError("kazoo logged no 'Session created' record: no negotiated timeout")
    return handler.timeouts[-1]


_EXPIRY = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Expiring session 0x([0-9a-f]+), "
    r"timeout of (\d+)ms exceeded"
)


def session_expiry(log_file: Path, session_hex: str) -> tuple[float, int] | None:
    """(epoch s of the expiry, its negotiated timeout ms) from ZooKeeper's log, or None yet."""
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        match = _EXPIRY.match(line)
        if match and match.group(2) == session_hex.lower().removeprefix("0x"):
            at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return at, int(match.group(3))
    return None


def zookeeper_conf(port: int) -> dict[str, str]:
    """ZooKeeper's `conf` four-letter command, as key -> value."""
    with socket.create_connection((HOST, port), timeout=5) as sock:
        sock.sendall(b"conf")
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    out = {}
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out
