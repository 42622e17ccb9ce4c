"""View models for the pages' tables: mirror rows shaped for display, with raw numbers kept.

A row keeps each raw figure (for `data-*` attributes and sorting in tests) next to its text.
Built from rows already loaded; nothing here queries the database (a `DeepStoreRow`'s segment
comes with its table).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from console.pages import display
from tables.domain import triage
from tables.domain.doctor import Diagnosis
from tables.domain.doctor_facts import (
    DeepStoreStep,
    HealerTiming,
    clock,
    committing_repair_allowed,
    deep_store_step,
)
from tables.mirror.diagnose import segment_view
from tables.mirror.flags import TableFlags, under_replicated
from tables.models import AuditEntry, MirroredSegment, MirroredTable, PartitionStatus

__all__ = [
    "DeepStoreRow",
    "PartitionRow",
    "PauseInfo",
    "ReplicaRow",
    "SegmentRow",
    "TableRow",
    "pause_info",
    "replica_comparison",
]

EV_PROBLEMS = ("ERROR", "OFFLINE")
KNOWN_LAG = TableFlags(lag_known=True)  # a row built without flags
UNKNOWN = "?"  # a figure no replica can tell (not reporting, or upstream offset unknown)
COMMIT_VERDICTS = ("COMMITTING", "COMMIT_OVERDUE")


def _int(value: Any) -> int | None:
    try:
        return None if value is None or value == "" else int(value)
    except (TypeError, ValueError):
        return None


def _float(value: Any) -> float | None:
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class PauseInfo:
    """A table's pause state, with who paused it (from the audit log) when known."""

    paused: bool
    partitions: tuple[int, ...] = ()
    reason_code: str = ""
    comment: str = ""
    since: dt.datetime | None = None
    since_raw: str = ""
    by: str = ""

    def applies_to(self, partition: int) -> bool:
        return self.paused or partition in self.partitions

    @property
    def summary(self) -> str:
        """`paused by alice since 2024-05-01 10:00 UTC (ADMINISTRATIVE): maintenance`."""
        if not self.paused and not self.partitions:
            return ""
        words = ["paused" if self.paused else f"partitions {self._partition_list} paused"]
        if self.by:
            words.append(f"by {self.by}")
        if self.since is not None:
            words.append(f"since {self.since:%Y-%m-%d %H:%M:%S} UTC")
        elif self.since_raw:
            words.append(f"since {self.since_raw}")
        if self.reason_code:
            words.append(f"({self.reason_code})")
        text = " ".join(words)
        return f"{text}: {self.comment}" if self.comment else text

    @property
    def _partition_list(self) -> str:
        return ", ".join(str(p) for p in self.partitions)


def pause_info(table: MirroredTable, last_pause: AuditEntry | None = None) -> PauseInfo:
    partitions = tuple(
        sorted(p for p in (_int(x) for x in table.paused_partitions or []) if p is not None)
    )
    if not table.paused and not partitions:
        return PauseInfo(False)
    return PauseInfo(
        paused=table.paused,
        partitions=partitions,
        reason_code=table.pause_reason,
        comment=table.pause_comment or (last_pause.reason if last_pause else ""),
        since=display.epoch_ms(table.pause_time),
        since_raw=table.pause_time,
        by=last_pause.username if last_pause else "",
    )


@dataclass(frozen=True)
class TableRow:
    """A table of the tables list, its figures formatted, with its flags (`tables.mirror.flags`)."""

    table: MirroredTable
    flags: TableFlags = KNOWN_LAG

    @property
    def segments_text(self) -> str:
        return display.count(self.table.segment_count)

    @property
    def lag_known(self) -> bool:
        return self.flags.lag_known

    @property
    def lag_text(self) -> str:
        return display.count(self.table.max_records_lag) if self.lag_known else UNKNOWN

    @property
    def time_lag_text(self) -> str:
        return display.millis(self.table.max_time_lag_ms) if self.lag_known else UNKNOWN

    @property
    def under_replicated_text(self) -> str:
        """`partitions 0, 3 under-replicated` (the first ten), or ""."""
        parts = self.flags.under_replicated
        if not parts:
            return ""
        listed = ", ".join(str(p) for p in parts[:10]) + (", …" if len(parts) > 10 else "")
        return f"partition{'s' if len(parts) > 1 else ''} {listed} under-replicated"

    @property
    def rate_text(self) -> str:
        return display.rate(self.table.rows_per_s)


@dataclass(frozen=True)
class ReplicaRow:
    """One server's figures for a partition's consuming segment, as it last published them."""

    server: str
    state: str
    consumer_state: str
    phase: str
    current_offset: int | None
    upstream_offset: int | None
    records_lag: int | None
    time_lag_ms: int | None
    rows_per_s: float | None
    last_consumed: dt.datetime | None
    updated: dt.datetime | None
    hold_reason: str = ""  # why a HOLDING consumer asks nothing (a build backing off)

    @classmethod
    def build(cls, server: str, raw: dict[str, Any] | Any) -> ReplicaRow:
        data = raw if isinstance(raw, dict) else {}
        return cls(
            server=server,
            state=str(data.get("state") or ""),
            consumer_state=str(data.get("consumerState") or ""),
            phase=str(data.get("phase") or ""),
            current_offset=_int(data.get("currentOffset")),
            upstream_offset=_int(data.get("upstreamOffset")),
            records_lag=_int(data.get("recordsLag")),
            time_lag_ms=_int(data.get("availabilityLagMs")),
            rows_per_s=_float(data.get("rowsPerSecond")),
            last_consumed=display.epoch_ms(data.get("lastConsumedMs")),
            updated=display.epoch_ms(data.get("updatedMs")),
            hold_reason=str(data.get("holdReason") or ""),
        )

    @property
    def reporting(self) -> bool:
        return self.updated is not None

    @property
    def problem(self) -> bool:
        return self.state in EV_PROBLEMS or self.consumer_state == "NOT_CONSUMING"

    @property
    def current_text(self) -> str:
        return display.count(self.current_offset)

    @property
    def upstream_text(self) -> str:
        return display.count(self.upstream_offset)

    @property
    def lag_known(self) -> bool:
        return self.reporting and triage.lag_known(self.upstream_offset)

    @property
    def lag_text(self) -> str:
        return display.count(self.records_lag) if self.lag_known else UNKNOWN

    @property
    def time_lag_text(self) -> str:
        return display.millis(self.time_lag_ms) if self.lag_known else UNKNOWN

    @property
    def rate_text(self) -> str:
        return display.rate(self.rows_per_s)


@dataclass(frozen=True)
class PartitionRow:
    """A stream partition with its verdict, figures and replicas."""

    status: PartitionStatus
    table: MirroredTable
    verdict_label: str
    verdict_help: str
    pause: PauseInfo
    replicas: list[ReplicaRow]
    now: dt.datetime | None = None  # render time: commit durations are counted up to it
    diagnosis: Diagnosis | None = None  # the ingestion doctor's, where the page shows one

    @classmethod
    def build(
        cls, status: PartitionStatus, pause: PauseInfo, now: dt.datetime | None = None
    ) -> PartitionRow:
        replicas = status.replicas if isinstance(status.replicas, dict) else {}
        return cls(
            status=status,
            table=status.table,
            verdict_label=display.verdict_label(status.verdict),
            verdict_help=display.VERDICT_HELP.get(status.verdict, ""),
            pause=pause if pause.applies_to(status.partition) else PauseInfo(False),
            replicas=[ReplicaRow.build(name, replicas[name]) for name in sorted(replicas)],
            now=now,
        )

    @property
    def partition(self) -> int:
        return self.status.partition

    @property
    def detail(self) -> str:
        """The verdict's detail; for a paused partition, who paused it, when and why; for a
        commit, its durations counted again up to `now` (from the replicas' since-times)."""
        if self.status.verdict == "PAUSED" and self.pause.summary:
            return self.pause.summary
        stored = self.status.verdict_detail
        if self.status.verdict in COMMIT_VERDICTS and self.now is not None:
            raw = self.status.replicas if isinstance(self.status.replicas, dict) else {}
            live = {
                name: triage.ReplicaLive.from_published(data)
                for name, data in raw.items()
                if isinstance(data, dict) and data.get("updatedMs")
            }
            fresh = triage.commit_detail(live, int(self.now.timestamp() * 1000))
            if fresh:
                _head, sep, note = stored.partition("; ")
                return fresh + sep + note
        return stored

    @property
    def lag_known(self) -> bool:
        return triage.lag_known(self.status.upstream_offset)

    @property
    def replicas_up(self) -> int:
        return sum(1 for r in self.replicas if r.state in ("CONSUMING", "ONLINE"))

    @property
    def under_replicated(self) -> bool:
        return under_replicated(
            self.status.consuming_segment, self.status.replicas, self.table.replication
        )

    @property
    def lag_text(self) -> str:
        return display.count(self.status.records_lag) if self.lag_known else UNKNOWN

    @property
    def time_lag_text(self) -> str:
        return display.millis(self.status.time_lag_ms) if self.lag_known else UNKNOWN

    @property
    def rate_text(self) -> str:
        return display.rate(self.status.rows_per_s)

    @property
    def stalled_text(self) -> str:
        return display.duration(self.status.stalled_s) if self.status.stalled_s else display.NONE

    @property
    def current_text(self) -> str:
        return display.count(self.status.current_offset)

    @property
    def upstream_text(self) -> str:
        return display.count(self.status.upstream_offset)


@dataclass(frozen=True)
class SegmentRow:
    """A segment with its replicas' states, why it is in trouble (if it is), and its age."""

    segment: MirroredSegment
    age_s: float | None

    @classmethod
    def build(cls, segment: MirroredSegment, now: dt.datetime) -> SegmentRow:
        created = display.epoch_ms(
            segment.creation_time_ms or segment.created_ms or segment.metadata_mtime_ms
        )
        age = (now - created).total_seconds() if created else None
        return cls(segment, age)

    @property
    def created(self) -> dt.datetime | None:
        s = self.segment
        return display.epoch_ms(s.creation_time_ms or s.created_ms)

    @property
    def age_text(self) -> str:
        return display.duration(self.age_s)

    @property
    def docs_text(self) -> str:
        return display.count(self.segment.total_docs)

    @property
    def size_text(self) -> str:
        return display.size(self.segment.size_bytes)

    @property
    def start_time(self) -> dt.datetime | None:
        return display.epoch_ms(self.segment.start_time_ms)

    @property
    def end_time(self) -> dt.datetime | None:
        return display.epoch_ms(self.segment.end_time_ms)

    @property
    def replicas(self) -> list[dict[str, Any]]:
        return replica_comparison(self.segment)

    @property
    def reason(self) -> str:
        """`ERROR on s1, s2; OFFLINE on s3; missing from the ExternalView on s4`."""
        rows = self.replicas
        parts = []
        for state in EV_PROBLEMS:
            servers = [r["server"] for r in rows if r["external"] == state]
            if servers:
                parts.append(f"{state} on {', '.join(servers)}")
        missing = [r["server"] for r in rows if r["ideal"] and not r["external"]]
        if missing:
            parts.append(f"missing from the ExternalView on {', '.join(missing)}")
        return "; ".join(parts) or "no replica problem in the mirror"


def replica_comparison(segment: MirroredSegment) -> list[dict[str, Any]]:
    """IdealState vs ExternalView per server: both states, and whether they differ."""
    ideal = segment.ideal_states if isinstance(segment.ideal_states, dict) else {}
    external = segment.external_states if isinstance(segment.external_states, dict) else {}
    rows = []
    for server in sorted(set(ideal) | set(external)):
        want, have = str(ideal.get(server) or ""), str(external.get(server) or "")
        rows.append(
            {
                "server": server,
                "ideal": want,
                "external": have,
                "mismatch": want != have,
                "error": have == "ERROR",
            }
        )
    return rows


@dataclass(frozen=True)
class DeepStoreRow:
    """A segment not in the deep store yet (COMMITTING, or DONE without a download URL): since
    when (its metadata's last write: commit start, or commit end for a peer-download commit),
    its replicas, and what the healer does next about it and when (`doctor_facts.DeepStoreStep`)."""

    segment: MirroredSegment
    step: DeepStoreStep
    now_ms: int
    repair_allowed: bool = True  # doctor_facts.committing_repair_allowed of the table's config

    @classmethod
    def build(cls, segment: MirroredSegment, timing: HealerTiming) -> DeepStoreRow:
        """`segment.table` loaded: its pauseless flag and config decide the step."""
        table = segment.table
        allowed = committing_repair_allowed(table.config or {})
        step = deep_store_step(
            segment_view(segment),
            pauseless=table.pauseless,
            repair_allowed=allowed,
            timing=timing,
        )
        return cls(segment, step, timing.now_ms, allowed)

    @property
    def since(self) -> dt.datetime | None:
        return display.epoch_ms(self.segment.metadata_mtime_ms)

    @property
    def since_text(self) -> str:
        mtime = self.segment.metadata_mtime_ms
        if mtime is None:
            return display.NONE
        return f"{clock(mtime, self.now_ms)} ({display.millis(self.now_ms - mtime)} ago)"

    @property
    def status_text(self) -> str:
        if self.segment.status == "COMMITTING":
            return "COMMITTING"
        return "DONE, no download URL (peer download)"

    @property
    def replicas(self) -> list[dict[str, Any]]:
        return replica_comparison(self.segment)

    @property
    def due_text(self) -> str:
        return self.step.when or "no automatic step"

    @property
    def reingest_refusal(self) -> str:
        """Why the Re-ingest button is not offered ("" when it is): the server refuses a segment
        whose download URL is present, even empty (round 2 §C.2), and the disaster-recovery mode
        forbids it for a partial-upsert or dedup table in DEFAULT mode (§C.4)."""
        if self.segment.status != "COMMITTING":
            return "DONE: its servers refuse to re-ingest a segment with a download URL, even empty"
        if not self.repair_allowed:
            return "disasterRecoveryMode DEFAULT forbids it (a partial-upsert or dedup table)"
        return ""
