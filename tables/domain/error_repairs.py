"""Which ERROR replicas the healing manager resets (pure; round 2 §A.6).

Pinot's `repairSegmentsInErrorState` for non-pauseless tables: an LLC segment in both the
IdealState and the ExternalView with an ERROR replica in the ExternalView is reset (Helix-style,
every replica not OFFLINE goes to OFFLINE and follows the IdealState back) when its status is not
IN_PROGRESS, or when it is IN_PROGRESS with every replica in ERROR; an IN_PROGRESS segment with
only some replicas in ERROR is not touched; a COMMITTING one with every replica in ERROR needs
re-ingestion (§A.6 case a). A segment without metadata is skipped, as Pinot skips it with a
warning.

Disaster-recovery gating (§A.6 step 4, §C.4): `repair_committing` is Pinot's
`allowRepairOfCommittingSegments` of the table (`doctor_facts.committing_repair_allowed`: its
`disasterRecoveryMode` is ALWAYS, or it is neither partial upsert nor dedup). When it is false, a
COMMITTING segment with every replica in ERROR is UNRECOVERABLE: nothing is done to it, and its
reason says so (for a pauseless table, naming the gauge `pauselessSegmentsInUnrecoverableErrorCount`
that counts it). Unlike Pinot, which then returns before any reset of a pauseless table, the other
ERROR segments of the table are still reset as usual (what the doctor's outlook predicts). A
table without pauseless consumption has no COMMITTING segment in normal operation; if one has,
it is treated the same way, as Pinot's case a does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from tables.domain.idealstate import InstanceState
from tables.domain.names import LLCSegmentName

__all__ = ["UNRECOVERABLE_GAUGE", "ErrorRepair", "ErrorRepairKind", "plan_error_repairs"]

IN_PROGRESS, COMMITTING = "IN_PROGRESS", "COMMITTING"
UNRECOVERABLE_GAUGE = "pauselessSegmentsInUnrecoverableErrorCount"
OFFLINE, ERROR = InstanceState.OFFLINE, InstanceState.ERROR


class ErrorRepairKind(StrEnum):
    RESET = "errorReset"
    REINGEST = "reingest"
    UNRECOVERABLE = "unrecoverable"  # REINGEST, but the disaster-recovery mode forbids it


@dataclass(frozen=True)
class ErrorRepair:
    kind: ErrorRepairKind
    segment: str
    instances: tuple[str, ...]  # the replicas to reset: IdealState instances not OFFLINE in the EV
    reason: str


def plan_error_repairs(
    ideal: Mapping[str, Mapping[str, str]],
    external: Mapping[str, Mapping[str, str]],
    statuses: Mapping[str, str | None],
    *,
    repair_committing: bool = True,
    pauseless: bool = False,
) -> tuple[list[ErrorRepair], int]:
    """(repairs, number of segments with every ExternalView replica in ERROR) for LLC segments in
    both views with an ERROR replica. `statuses`: segment -> ZK status (absent: no metadata).
    `repair_committing` and `pauseless`: the table's DR gating (module docstring)."""
    repairs: list[ErrorRepair] = []
    all_error = 0
    for segment in sorted(external):
        replicas = external[segment]
        if LLCSegmentName.parse(segment) is None or segment not in ideal:
            continue
        errors = sorted(i for i, s in replicas.items() if s == ERROR)
        if not errors:
            continue
        every = all(s == ERROR for s in replicas.values())
        all_error += every
        if segment not in statuses:
            continue  # no metadata: Pinot skips it with a warning
        status = statuses[segment]
        targets = tuple(sorted(i for i in ideal[segment] if replicas.get(i) not in (None, OFFLINE)))
        where = ", ".join(errors)
        if status == COMMITTING and every:
            repairs.append(
                _committing_repair(segment, targets, where, repair_committing, pauseless)
            )
        elif status == IN_PROGRESS and not every:
            continue  # the other replicas go on consuming; Pinot leaves it alone
        else:
            repairs.append(
                ErrorRepair(
                    ErrorRepairKind.RESET,
                    segment,
                    targets,
                    f"{segment} ({status}) is ERROR on {where}: reset, then the replicas follow "
                    "the IdealState again",
                )
            )
    return repairs, all_error


def _committing_repair(
    segment: str, targets: tuple[str, ...], where: str, allowed: bool, pauseless: bool
) -> ErrorRepair:
    """§A.6 case a: re-ingestion, or nothing at all when the DR mode forbids it."""
    head = f"{segment} is COMMITTING and ERROR on every replica ({where})"
    if allowed:
        return ErrorRepair(
            ErrorRepairKind.REINGEST,
            segment,
            targets,
            f"{head}: it needs re-ingestion from the stream",
        )
    where_counted = f"; counted in {UNRECOVERABLE_GAUGE}" if pauseless else ""
    return ErrorRepair(
        ErrorRepairKind.UNRECOVERABLE,
        segment,
        targets,
        f"{head}: unrecoverable in DEFAULT mode (a partial-upsert or dedup table, "
        f"disasterRecoveryMode DEFAULT{where_counted}): left untouched; set "
        "disasterRecoveryMode to ALWAYS to re-ingest it, or delete the partition's segments "
        "from this one on",
    )
