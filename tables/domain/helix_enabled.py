"""Helix's `HELIX_ENABLED` simpleField, on a table's IdealState and on an instance config (pure).

A resource (table) is disabled when its IdealState has `HELIX_ENABLED` = "false" (Helix's
`IdealState.isEnabled`, written by Pinot's `PUT /tables/{t}/state?state=disable`); an instance is
disabled when its `CONFIGS/PARTICIPANT/<id>` record has `HELIX_ENABLED` = "false" (Helix's
`InstanceConfig.getInstanceEnabled`). Absent or any other value is enabled; the comparison ignores
case, as Java's `Boolean.parseBoolean` would read "FALSE".

Helix takes every replica of a disabled resource, and every replica on a disabled instance, to the
state model's initial state (OFFLINE for `SegmentOnlineOfflineStateModel`), leaving the IdealState
as it is; re-enabling brings them back to the IdealState's states. `effective_targets` is that
rule for one server's targets.
"""

from __future__ import annotations

from collections.abc import Mapping

from .znrecord import ZNRecord

__all__ = ["HELIX_ENABLED", "OFFLINE", "effective_targets", "is_enabled", "with_enabled"]

HELIX_ENABLED = "HELIX_ENABLED"
OFFLINE = "OFFLINE"


def is_enabled(record: ZNRecord | None) -> bool:
    """False only when `record` says HELIX_ENABLED=false (a missing record is enabled)."""
    if record is None:
        return True
    return record.simple_fields.get(HELIX_ENABLED, "true").strip().lower() != "false"


def with_enabled(record: ZNRecord, enabled: bool) -> ZNRecord | None:
    """`record` with HELIX_ENABLED set as Helix writes it ("true"/"false"); None when unchanged."""
    value = "true" if enabled else "false"
    if record.simple_fields.get(HELIX_ENABLED) == value:
        return None
    out = record.copy()
    out.simple_fields[HELIX_ENABLED] = value
    return out


def effective_targets(
    targets: Mapping[str, str], *, table_enabled: bool, instance_enabled: bool
) -> dict[str, str]:
    """A server's target state per segment once the table's and the instance's HELIX_ENABLED
    are applied: unchanged when both are enabled, else OFFLINE for every assigned segment."""
    if table_enabled and instance_enabled:
        return dict(targets)
    return {segment: OFFLINE for segment in targets}
