"""Which ERROR replicas the healing manager resets (pure; round 2 §A.6).

Pinot's `repairSegmentsInErrorState` for non-pauseless tables: an LLC segment in both the
IdealState and the ExternalView with an ERROR replica in the ExternalView is reset (Helix-style,
every replica not OFFLINE goes to OFFLINE and follows the IdealState back) when its status is not
IN_PROGRESS, or when it is IN_PROGRESS with every replica in ERROR; an IN_PROGRESS segment with
only some replicas in ERROR is not touched; a COMMITTING one with every replica in ERROR needs
re-ingestion. A segment without metadata is skipped, as Pinot skips it with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from tables.domain.idealstate import InstanceState
from tables.domain.names import LLCSegmentName

__all__ = ["ErrorRepair", "ErrorRepairKind", "plan_error_repairs"]

IN_PROGRESS, COMMITTING = "IN_PROGRESS", "COMMITTING"
OFFLINE, ERROR = InstanceState.OFFLINE, InstanceState.ERROR


class ErrorRepairKind(StrEnum):
    RESET = "errorReset"
    REINGEST = "reingest"


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
) -> tuple[list[ErrorRepair], int]:
    """(repairs, number of segments with every ExternalView replica in ERROR) for LLC segments in
    both views with an ERROR replica. `statuses`: segment -> ZK status (absent: no metadata)."""
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
                ErrorRepair(
                    ErrorRepairKind.REINGEST,
                    segment,
                    targets,
                    f"{segment} is COMMITTING and ERROR on every replica ({where}): it needs "
                    "re-ingestion from the stream",
                )
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
