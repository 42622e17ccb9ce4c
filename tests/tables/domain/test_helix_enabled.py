"""HELIX_ENABLED on IdealStates and instance configs (pure)."""

from __future__ import annotations

from tables.domain.helix_enabled import effective_targets, is_enabled, with_enabled
from tables.domain.znrecord import ZNRecord


def test_only_false_disables_and_a_missing_record_is_enabled():
    assert is_enabled(None)
    assert is_enabled(ZNRecord(id="t"))
    assert is_enabled(ZNRecord(id="t", simple_fields={"HELIX_ENABLED": "true"}))
    assert not is_enabled(ZNRecord(id="t", simple_fields={"HELIX_ENABLED": "false"}))
    assert not is_enabled(ZNRecord(id="t", simple_fields={"HELIX_ENABLED": "FALSE"}))


def test_with_enabled_writes_the_flag_and_nothing_else_or_nothing_when_unchanged():
    record = ZNRecord(id="t", simple_fields={"REPLICAS": "2"}, map_fields={"s": {"a": "ONLINE"}})
    disabled = with_enabled(record, False)
    assert disabled is not None
    assert disabled.simple_fields == {"REPLICAS": "2", "HELIX_ENABLED": "false"}
    assert disabled.map_fields == record.map_fields
    assert record.simple_fields == {"REPLICAS": "2"}  # not mutated
    assert with_enabled(disabled, False) is None
    assert with_enabled(disabled, True).simple_fields["HELIX_ENABLED"] == "true"


def test_a_disabled_table_or_instance_aims_every_assigned_segment_at_offline():
    targets = {"a": "CONSUMING", "b": "ONLINE"}
    assert effective_targets(targets, table_enabled=True, instance_enabled=True) == targets
    offline = {"a": "OFFLINE", "b": "OFFLINE"}
    assert effective_targets(targets, table_enabled=False, instance_enabled=True) == offline
    assert effective_targets(targets, table_enabled=True, instance_enabled=False) == offline
