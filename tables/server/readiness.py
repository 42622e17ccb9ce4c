"""A server's readiness, as Pinot's server answers `GET /health/readiness`.

Contract:
- `ServerReadiness(instance, zk_problem, catchup_wait_ms, offset_checker)` runs one daemon thread
  that evaluates the startup status (`tables.domain.readiness.StartupStatus`) every `interval_s`
  until it is GOOD, then ends: Pinot does not re-check a started server. The resources and
  CONSUMING segments to wait for are read from the IdealStates in ZooKeeper once the instance is
  registered; each round reads the IdealState and EXTERNALVIEW of the tables still pending and
  takes CURRENTSTATES and the consumers from the instance itself. A failed round (ZooKeeper away)
  keeps the last answer and is tried again.
- `reason()` is what the probe answers, without any round trip: "Server is shutting down" once
  `stop()` was called, else the ZooKeeper problem (`zk_problem()`: the session is suspended or
  lost; this stays true after startup), else the last startup reason (None once GOOD).
- The catch-up target of a partition is the stream's latest offset when its first consumer seen
  here started (`SegmentConsumer.latest_at_start`), kept when a successor consumer takes over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tables.domain.backoff import LogThrottle
from tables.domain.names import LLCSegmentName
from tables.domain.readiness import Consumption, Snapshot, StartupStatus, assigned_states
from tables.domain.segment_states import SegmentState
from tables.zk.records import read_record

from .consumer import SegmentConsumer
from .instance import Replica, ServerInstance

__all__ = ["ServerReadiness"]

log = logging.getLogger(__name__)

SHUTTING_DOWN = "Server is shutting down"
NOT_REGISTERED = "Pinot server status is STARTING: not registered with the cluster yet"


class ServerReadiness:
    def __init__(
        self,
        instance: ServerInstance,
        zk_problem: Callable[[], str | None],
        catchup_wait_ms: int,
        offset_checker: bool = True,
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.instance = instance
        self.zk_problem = zk_problem
        self.catchup_wait_ms, self.offset_checker = catchup_wait_ms, offset_checker
        self.interval_s, self.clock = interval_s, clock
        self.status: StartupStatus | None = None
        self._reason: str | None = NOT_REGISTERED
        self._targets: dict[tuple[str, str], int] = {}
        self._stop = threading.Event()
        self._log = LogThrottle(every_s=60.0)
        self._thread = threading.Thread(target=self._run, name="readiness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def reason(self) -> str | None:
        """Why the server is not ready, or None when it is (see the contract)."""
        if self._stop.is_set():
            return SHUTTING_DOWN
        return self.zk_problem() or self._reason

    # --- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.evaluate() is None:
                    log.info("%s: startup status GOOD", self.instance.instance_id)
                    return
            except Exception as exc:
                if self._log.allow(type(exc).__name__, time.monotonic())[0]:
                    log.warning("%s: readiness round failed: %s", self.instance.instance_id, exc)
            self._stop.wait(self.interval_s)

    def evaluate(self) -> str | None:
        """One round: the startup status now (None: GOOD)."""
        now_ms = int(self.clock() * 1000)
        if self.status is None:
            if self.instance.session is None:
                return self._reason
            ideal = {t: m for t, m in self._ideal_states().items() if m is not None}
            self.status = StartupStatus.at_startup(
                ideal, self.instance.instance_id, now_ms, self.catchup_wait_ms, self.offset_checker
            )
        reason = self.status.evaluate(self._snapshot(), now_ms)
        self._reason = None if reason is None else f"Pinot server status is STARTING: {reason}"
        return reason

    # --- reads --------------------------------------------------------------------------------
    def _map_fields(self, path: str) -> dict[str, dict[str, str]] | None:
        versioned = read_record(self.instance.ctx().client, path)
        if versioned is None:
            return None
        record = versioned.record
        if record.simple_fields.get("HELIX_ENABLED", "true").lower() == "false":
            return None  # a disabled resource is not waited for, as in Pinot
        return record.map_fields

    def _ideal_states(self, tables: list[str] | None = None) -> dict[str, dict | None]:
        ctx = self.instance.ctx()
        if tables is None:
            children = ctx.client.get_children(ctx.paths.idealstates)
            tables = [t for t in children if t.endswith("_REALTIME")]
        return {t: self._map_fields(ctx.paths.idealstate(t)) for t in tables}

    def _snapshot(self) -> Snapshot:
        assert self.status is not None
        ctx, me = self.instance.ctx(), self.instance.instance_id
        tables = list(self.status.pending())
        ideal = {
            table: None if fields is None else assigned_states(fields, me)
            for table, fields in self._ideal_states(tables).items()
        }
        current, external = {}, {}
        for table in tables:
            states = self.instance.current_states(table)
            current[table] = {seg: s["CURRENT_STATE"] for seg, s in states.items()}
            view = self._map_fields(ctx.paths.externalview(table)) or {}
            external[table] = {seg: s[me] for seg, s in view.items() if me in s}
        consumption = {}
        for table, segment in self.status.consuming:
            found = self._consumption(table, segment, ideal.get(table))
            if found is not None:
                consumption[(table, segment)] = found
        return Snapshot(ideal, current, external, consumption)

    def _consumption(
        self, table: str, segment: str, assigned: dict[str, str] | None
    ) -> Consumption | None:
        """The partition of a startup CONSUMING segment; None while its consumer is to start."""
        name = LLCSegmentName.parse(segment)
        replicas = self.instance.replicas_of(table) or {}
        consumer = None if name is None else _newest_consumer(replicas, name.partition_group_id)
        if consumer is not None:
            key = (table, segment)
            if key not in self._targets and consumer.latest_at_start is not None:
                self._targets[key] = consumer.latest_at_start
            return Consumption(True, consumer.next_offset, self._targets.get(key))
        replica = replicas.get(segment)
        still_consuming = assigned is not None and assigned.get(segment) == "CONSUMING"
        if still_consuming and (replica is None or replica.state in (None, SegmentState.OFFLINE)):
            return None
        return Consumption(False)


def _newest_consumer(replicas: dict[str, Replica], partition: int) -> SegmentConsumer | None:
    """The running consumer of `partition` with the highest sequence number, if any."""
    best: tuple[int, SegmentConsumer] | None = None
    for segment, replica in replicas.items():
        name, consumer = LLCSegmentName.parse(segment), replica.consumer
        if name is None or consumer is None or consumer.failed:
            continue
        if replica.state is not SegmentState.CONSUMING or name.partition_group_id != partition:
            continue
        if best is None or name.sequence_number > best[0]:
            best = (name.sequence_number, consumer)
    return None if best is None else best[1]
