"""The shared read model of the mirror (`tables.mirror.read_model`) that the pages, `/api/v1/` and
`/metrics` all read: freshness and staleness, table lookup by typed or raw name, the filters and
the shared sort keys, over mirror rows written by the test."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tables.domain import triage
from tables.mirror import read_model
from tables.models import HEALTH_RANK, Health, MirrorState
from tests.console import mirror_factory as mf

pytestmark = pytest.mark.django_db


def test_the_django_health_choices_are_the_domain_enum():
    assert list(Health.values) == [h.value for h in triage.Health]
    assert HEALTH_RANK == triage.HEALTH_RANK
    assert Health.BAD == triage.Health.BAD


def test_freshness_before_the_first_sync_is_stale_with_no_age(settings):
    settings.MIRROR_SYNC_SECONDS = 5
    found = read_model.freshness()
    assert (found.last_synced, found.age_s, found.stale) == (None, None, True)
    assert found.threshold_s == read_model.STALE_AFTER_INTERVALS * 5
    assert read_model.mirror_state().name == read_model.MIRROR_NAME
    assert read_model.last_synced() is None


def test_freshness_turns_stale_past_three_sync_intervals(settings):
    settings.MIRROR_SYNC_SECONDS = 5
    now = timezone.now()
    state = MirrorState(name=read_model.MIRROR_NAME, last_synced=now - dt.timedelta(seconds=15))
    assert not read_model.freshness(state, now).stale
    assert read_model.freshness(state, now + dt.timedelta(seconds=0.5)).stale
    assert read_model.freshness(state, now).age_s == pytest.approx(15.0)
    # A clock behind the sync's stamp never yields a negative age.
    assert read_model.freshness(state, now - dt.timedelta(seconds=60)).age_s == 0.0


def test_freshness_reads_the_one_state_row_with_its_error_and_duration():
    mf.mirror_state(age_s=2, error="ConnectionLoss", duration_ms=1200)
    found = read_model.freshness()
    assert (found.error, found.duration_ms) == ("ConnectionLoss", 1200)
    assert found.age_s == pytest.approx(2, abs=1)
    assert read_model.last_synced() == found.last_synced


def test_a_raw_name_finds_the_realtime_table_first_and_a_typed_name_only_itself():
    offline = mf.table("events", "OFFLINE")
    realtime = mf.table("events", "REALTIME")
    assert read_model.table_named("events") == realtime
    assert read_model.table_named("events_OFFLINE") == offline
    realtime.delete()
    assert read_model.table_named("events") == offline
    assert read_model.table_named("events_REALTIME") is None
    assert read_model.table_named("unknown") is None


def test_table_filters_and_the_shared_sort_keys():
    mf.table("a", health="BAD", tenant="t1", paused=True, max_records_lag=5)
    mf.table("b", health="WARNING", tenant="t2", pauseless=True, max_records_lag=50)
    mf.table("c", "OFFLINE", health="GOOD", tenant="t1")

    def names(**filters) -> list[str]:
        return sorted(t.name for t in read_model.tables(**filters))

    assert names(q="B_") == ["b_REALTIME"]
    assert names(health={"BAD", "WARNING"}) == ["a_REALTIME", "b_REALTIME"]
    assert names(tenant="t1") == ["a_REALTIME", "c_OFFLINE"]
    assert names(paused=True) == ["a_REALTIME"]
    assert names(paused=False, pauseless=False) == ["c_OFFLINE"]
    assert names(table_type="OFFLINE") == ["c_OFFLINE"]
    assert read_model.table_order("-health") == ("-health", ("-health_rank", "name"))
    assert read_model.table_order("name") == ("name", ("name",))
    fallback = (read_model.DEFAULT_TABLE_SORT, ("-health_rank", "name"))
    assert read_model.table_order("bogus") == fallback
    ordered = read_model.tables().order_by(*read_model.table_order("-lag")[1])
    assert [t.name for t in ordered] == ["b_REALTIME", "a_REALTIME", "c_OFFLINE"]


def test_partition_segment_and_error_filters():
    events, other = mf.table("events"), mf.table("other")
    mf.partition(events, 0, verdict="CONSUMING")
    mf.partition(events, 1, verdict="STALLED")
    mf.partition(other, 0, verdict="LAGGING")
    mf.segment(events, 0, 0)
    mf.segment(events, 1, 0, has_error=True, status="DONE")
    mf.segment(events, 1, 1, display_state="CONSUMING")
    mf.segment(other, 0, 0, all_offline=True)

    assert [p.partition for p in read_model.partitions(table=events)] == [0, 1]
    assert read_model.partitions(verdict="STALLED").get().table == events
    assert read_model.partitions(health="WARNING").get().table == other
    assert read_model.partitions(table_contains="OTH").count() == 1
    worst = read_model.partitions().order_by(*read_model.PARTITIONS_WORST_FIRST)
    assert [(p.table.raw_name, p.partition) for p in worst[:1]] == [("events", 1)]

    assert read_model.segments(events, state={"CONSUMING"}).get().sequence == 1
    assert read_model.segments(events, partition=1).count() == 2
    assert read_model.segments(events, status="IN_PROGRESS").get().sequence == 1
    assert read_model.segments(events, q="events__0__").count() == 1

    errors = read_model.error_segments()
    assert [s.table.raw_name for s in errors] == ["events", "other"]
    assert read_model.error_segments(table=other).get().table == other
    assert read_model.error_segments(table_contains="EVE").get().table == events


def test_leader_instance_and_audit_filters():
    mf.lead_partition(1, "Controller_b_9000", ["x_REALTIME"])
    mf.lead_partition(0, "Controller_a_9000", [])
    mf.instance("Server_a_8001", live=True, tags=["DefaultTenant_REALTIME"])
    mf.instance("Server_b_8002", live=False, tags=["other_REALTIME"])
    mf.instance("Controller_a_9000", kind="CONTROLLER")
    now = timezone.now()
    mf.audit("alice", "pause", "events_REALTIME", at=now - dt.timedelta(minutes=5))
    mf.audit("bob", "resume", "events_REALTIME", at=now, result="REFUSED", source="api")

    assert [p.partition_id for p in read_model.leaders()] == [0, 1]
    assert read_model.instances().first().name == "Controller_a_9000"
    assert [i.name for i in read_model.instances(kind="SERVER", live=False)] == ["Server_b_8002"]
    assert [i.name for i in read_model.instances(tag="other_REALTIME")] == ["Server_b_8002"]

    assert [e.username for e in read_model.audit()] == ["bob", "alice"]
    assert read_model.audit(user="ALI").get().action == "pause"
    assert read_model.audit(result="REFUSED", source="api").get().username == "bob"
    assert read_model.audit(target="events", action="resume").get().username == "bob"
    assert read_model.audit(since=now - dt.timedelta(minutes=1)).get().username == "bob"
    assert read_model.audit(until=now - dt.timedelta(minutes=1)).get().username == "alice"
