"""Disaster-recovery gating of the ERROR repairs (round 2 §A.6 step 4-6, §C.4): a COMMITTING
segment with every replica in ERROR is re-ingested unless the table is partial upsert or dedup in
DEFAULT mode; then it is left untouched and the reason names the unrecoverable gauge. Other
ERROR segments are reset either way."""

from __future__ import annotations

import pytest

from tables.domain.doctor_facts import committing_repair_allowed
from tables.domain.error_repairs import UNRECOVERABLE_GAUGE, ErrorRepairKind, plan_error_repairs


def seg(partition: int, sequence: int) -> str:
    return f"t__{partition}__{sequence}__20261125T1200Z"


IDEAL = {
    seg(0, 1): {"a": "ONLINE", "b": "ONLINE"},
    seg(1, 1): {"a": "ONLINE", "b": "ONLINE"},
    seg(2, 1): {"a": "ONLINE", "b": "ONLINE"},
}
EXTERNAL = {
    seg(0, 1): {"a": "ERROR", "b": "ERROR"},  # COMMITTING, all ERROR: case a
    seg(1, 1): {"a": "ERROR", "b": "ONLINE"},  # COMMITTING, some ERROR: reset (case c)
    seg(2, 1): {"a": "ERROR", "b": "ONLINE"},  # DONE, some ERROR: reset
}
STATUSES = {seg(0, 1): "COMMITTING", seg(1, 1): "COMMITTING", seg(2, 1): "DONE"}


def kinds(repairs):
    return [(r.kind, r.segment) for r in repairs]


def test_a_committing_segment_in_error_everywhere_is_reingested_when_allowed():
    repairs, all_error = plan_error_repairs(IDEAL, EXTERNAL, STATUSES, pauseless=True)
    assert all_error == 1
    assert kinds(repairs) == [
        (ErrorRepairKind.REINGEST, seg(0, 1)),
        (ErrorRepairKind.RESET, seg(1, 1)),
        (ErrorRepairKind.RESET, seg(2, 1)),
    ]
    assert repairs[0].instances == ("a", "b")


def test_default_mode_leaves_it_untouched_and_names_the_gauge():
    repairs, all_error = plan_error_repairs(
        IDEAL, EXTERNAL, STATUSES, repair_committing=False, pauseless=True
    )
    assert all_error == 1
    assert kinds(repairs) == [
        (ErrorRepairKind.UNRECOVERABLE, seg(0, 1)),
        (ErrorRepairKind.RESET, seg(1, 1)),
        (ErrorRepairKind.RESET, seg(2, 1)),
    ]
    reason = repairs[0].reason
    assert "unrecoverable in DEFAULT mode" in reason and UNRECOVERABLE_GAUGE in reason


def test_a_table_without_pauseless_does_not_name_the_pauseless_gauge():
    repairs, _ = plan_error_repairs(
        IDEAL, EXTERNAL, STATUSES, repair_committing=False, pauseless=False
    )
    assert repairs[0].kind is ErrorRepairKind.UNRECOVERABLE
    assert UNRECOVERABLE_GAUGE not in repairs[0].reason


def _config(mode: str | None = None, upsert: str | None = None, dedup: object = None) -> dict:
    stream: dict[str, object] = {"pauselessConsumptionEnabled": True}
    if mode is not None:
        stream["disasterRecoveryMode"] = mode
    rest: dict[str, object] = {"ingestionConfig": {"streamIngestionConfig": stream}}
    if upsert is not None:
        rest["upsertConfig"] = {"mode": upsert}
    if dedup is not None:
        rest["dedupConfig"] = {"dedupEnabled": dedup}
    return rest


@pytest.mark.parametrize(
    ("config", "allowed"),
    [
        (_config(), True),
        (_config(upsert="FULL"), True),  # full upsert is not blocked
        (_config(upsert="PARTIAL"), False),
        (_config(mode="DEFAULT", upsert="PARTIAL"), False),
        (_config(mode="ALWAYS", upsert="PARTIAL"), True),
        (_config(dedup=True), False),
        (_config(dedup=False), True),
        (_config(mode="ALWAYS", dedup=True), True),
    ],
)
def test_committing_repair_allowed_is_pinots_rule(config, allowed):
    assert committing_repair_allowed(config) is allowed
