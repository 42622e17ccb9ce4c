"""The periodic work respects leadership, on a real ZooKeeper cluster and Redis stream: who leads a
table (`tables.cluster.leadership.table_leaders`: a live MASTER, or the cluster leader when the
resource is disabled), the healing manager's task acting on behalf of that controller, and a table
without one left alone with the reason recorded."""

from __future__ import annotations

import pytest

from tables.cluster import context
from tables.cluster.leadership import (
    lead_controller_for,
    leader_for_table,
    leader_table_map,
    table_leaders,
)
from tables.controller.llc import LLCSegmentManager
from tables.controller.resources import ResourceManager
from tables.domain.leadership import partition_name
from tables.domain.names import LLCSegmentName
from tables.domain.periods import REALTIME_SEGMENT_VALIDATION, TASK_ERROR_COUNTER
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.models import DurableCounter, HealingRun
from tables.periodic_runs import validate
from tables.zk import codec
from tables.zk.client import new_client
from tables.zk.messages import SRC_NAME, message_ids, read_message
from tables.zk.participants import register_participant
from tables.zk.records import create_record, read_record
from tests.cluster_fixtures import PATHS, load
from tests.tables.leaders import lead_every_partition, set_resource_enabled, write_lead_view

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
PARTITION = partition_name(15)  # githubEvents' (reference §8)
A, B = "Controller_127.0.0.1_9000", "Controller_127.0.0.1_9001"


@pytest.fixture
def github(servers, topic, zk) -> str:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    rest["segmentsConfig"]["replication"] = "2"
    manager.add_table(rest)
    return topic


def _ideal(zk) -> dict[str, dict[str, str]]:
    return read_record(zk, PATHS.idealstate(TABLE)).record.map_fields


def _consuming(zk, partition: int) -> str:
    (segment,) = [
        s
        for s, states in _ideal(zk).items()
        if LLCSegmentName.parse(s).partition_group_id == partition
        and "CONSUMING" in states.values()
    ]
    return segment


def _stop_consuming(zk, partition: int) -> str:
    """Every replica of the partition's consuming segment stopped: a repair is due at once."""
    segment = _consuming(zk, partition)
    llc = LLCSegmentManager(context.current())
    for server in _ideal(zk)[segment]:
        llc.segment_stopped_consuming(TABLE, segment, server)
    return segment


def _errors() -> int:
    return DurableCounter.value_of(TASK_ERROR_COUNTER, REALTIME_SEGMENT_VALIDATION)


# --- who leads ----------------------------------------------------------------------------------


def test_a_master_counts_only_while_it_is_live(cluster, settings):
    assert lead_controller_for(context.current(), TABLE) is None  # no view yet
    leaders = table_leaders(context.current())
    assert leaders.partition("githubEvents") == leaders.partition(TABLE) == PARTITION
    assert leaders.why_none(TABLE) == "no MASTER in the leadControllerResource EXTERNALVIEW"

    other = new_client(settings.ZK_HOSTS)  # B's session
    register_participant(cluster, PATHS, A, "127.0.0.1", 9000, ["controller"])
    register_participant(other, PATHS, B, "127.0.0.1", 9001, ["controller"])
    write_lead_view(cluster, {PARTITION: {B: "MASTER"}, partition_name(3): {A: "MASTER"}})
    assert lead_controller_for(context.current(), TABLE) == B
    assert lead_controller_for(context.current(), "myTable") == A  # partition 3
    assert lead_controller_for(context.current(), "meetupRsvp") is None  # 9: no MASTER

    other.stop()  # B dies; the view, written by nobody since, still names it
    other.close()
    assert lead_controller_for(context.current(), TABLE) is None
    leaders = table_leaders(context.current())
    assert leaders(TABLE) is None and leaders("myTable") == A
    assert leaders.why_none(TABLE) == f"its MASTER {B} is not live (no LIVEINSTANCE)"
    # Pinot's GET /leader/tables reports the view as it is.
    create_record(cluster, PATHS.idealstate(TABLE), ZNRecord(id=TABLE))
    assert leader_for_table(context.current(), TABLE)[1][PARTITION].leader_id == B
    assert leader_table_map(context.current())[1][PARTITION].leader_id == B

    # A view caught mid-change with two MASTERs: the live one, then the first by name.
    write_lead_view(cluster, {PARTITION: {B: "MASTER", A: "MASTER"}})
    assert lead_controller_for(context.current(), TABLE) == A
    register_participant(cluster, PATHS, "Controller_0_1", "0", 1, ["controller"])
    write_lead_view(cluster, {PARTITION: {"Controller_0_1": "MASTER", A: "MASTER"}})
    assert lead_controller_for(context.current(), TABLE) == "Controller_0_1"


def test_with_the_resource_disabled_the_cluster_leader_leads_every_table(cluster):
    lead_every_partition(cluster, A)
    set_resource_enabled(cluster, False)
    leaders = table_leaders(context.current())
    assert leaders(TABLE) is None and leaders("myTable") is None  # no /CONTROLLER/LEADER
    assert leaders.why_none(TABLE) == (
        "leadControllerResource is disabled and /CONTROLLER/LEADER is absent"
    )
    create_record(cluster, PATHS.controller_leader, ZNRecord(id="127.0.0.1_9001"))
    leaders = table_leaders(context.current())
    assert leaders(TABLE) == leaders("myTable") == B
    assert lead_controller_for(context.current(), TABLE) == B


# --- the healing manager's task -----------------------------------------------------------------


def test_a_table_without_a_lead_controller_is_not_repaired_and_says_why(github, zk):
    segment = _stop_consuming(zk, 3)
    before, errors = _ideal(zk), _errors()

    summary = validate("githubEvents", "schedule", "schedule-0000aaaa")

    assert summary["tables"] == [
        {"table": TABLE, "actions": 0, "error": None, "leadController": None}
    ]
    assert _ideal(zk) == before  # nothing repaired
    run = HealingRun.objects.get(run_id="schedule-0000aaaa")
    assert (run.table, run.action_count, run.error, run.lead_controller) == (TABLE, 0, "", "")
    assert run.skipped == [
        f"{PARTITION}: no lead controller (no MASTER in the leadControllerResource "
        "EXTERNALVIEW); the table is not validated until it has one, as Pinot runs no "
        "validation for a table without a lead controller"
    ]
    assert _errors() == errors  # leaderless is not a failure

    # Once a live controller is MASTER of the partition, the next run repairs, on its behalf.
    lead_every_partition(zk, A)
    summary = validate(None, "schedule", "schedule-0000bbbb")
    (result,) = summary["tables"]
    assert result["leadController"] == A and result["actions"] >= 1
    run = HealingRun.objects.get(run_id="schedule-0000bbbb")
    assert run.lead_controller == A and run.skipped == []
    assert any(a["segment"] == segment for a in run.actions)
    assert set(_ideal(zk)[segment].values()) == {"OFFLINE"}
    assert _consuming(zk, 3) != segment  # a new consuming segment replaced it


def test_a_dead_master_is_no_leader_and_is_named(github, zk, settings):
    other = new_client(settings.ZK_HOSTS)
    lead_every_partition(other, B)
    other.stop()
    other.close()
    validate(TABLE, "api", "api-0000dead")
    run = HealingRun.objects.get(run_id="api-0000dead")
    assert run.lead_controller == "" and run.action_count == 0
    assert run.skipped[0].startswith(f"{PARTITION}: no lead controller (its MASTER {B} is not live")


def test_the_run_acts_for_the_master_of_the_tables_partition(github, zk, settings):
    """Two live controllers; B leads githubEvents' partition: the ERROR resets are B's."""
    register_participant(zk, PATHS, A, "127.0.0.1", 9000, ["controller"])
    register_participant(zk, PATHS, B, "127.0.0.1", 9001, ["controller"])
    view = {partition_name(i): {A: "MASTER", B: "SLAVE"} for i in range(24)}
    view[PARTITION] = {A: "SLAVE", B: "MASTER"}
    write_lead_view(zk, view)
    segment = _consuming(zk, 1)
    replicas = sorted(_ideal(zk)[segment])
    external = ZNRecord(id=TABLE, map_fields={segment: dict.fromkeys(replicas, "ERROR")})
    zk.create(PATHS.externalview(TABLE), codec.encode(external), makepath=True)

    summary = validate(TABLE, "api", "api-0000b0b0")

    assert summary["tables"][0]["leadController"] == B
    run = HealingRun.objects.get(run_id="api-0000b0b0")
    assert run.lead_controller == B
    assert [a["kind"] for a in run.actions] == ["errorReset"]
    for instance in replicas:
        (msg_id,) = message_ids(zk, PATHS, instance)
        message = read_message(zk, PATHS, instance, msg_id)
        assert message.simple_fields[SRC_NAME] == f"{B}-ADMIN"


def test_with_the_resource_disabled_the_run_is_made_for_the_cluster_leader(github, zk):
    lead_every_partition(zk, A)
    set_resource_enabled(zk, False)
    validate(TABLE, "api", "api-00000001")
    run = HealingRun.objects.get(run_id="api-00000001")
    assert run.lead_controller == "" and "is disabled" in run.skipped[0]
    create_record(zk, PATHS.controller_leader, ZNRecord(id="127.0.0.1_9001"))
    validate(TABLE, "api", "api-00000002")
    run = HealingRun.objects.get(run_id="api-00000002")
    assert (run.lead_controller, run.skipped, run.error) == (B, [], "")


def test_a_controller_that_gained_the_table_is_a_trigger(github, zk):
    lead_every_partition(zk, A)
    summary = validate(TABLE, "leader", "leader-00000001")
    assert summary["error"] is None
    run = HealingRun.objects.get(run_id="leader-00000001")
    assert (run.trigger, run.lead_controller, run.error) == ("leader", A, "")
