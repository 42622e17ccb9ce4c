"""init_cluster and participants against the real ZooKeeper."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from kazoo.exceptions import NodeExistsError

from tables.domain.leadership import partition_name
from tables.zk.client import new_client
from tables.zk.cluster import init_cluster, is_initialised
from tables.zk.participants import register_participant
from tables.zk.paths import ClusterPaths
from tables.zk.records import read_record

pytestmark = pytest.mark.zk
PATHS = ClusterPaths("PinotCluster")


def test_init_cluster_creates_the_skeleton_once(zk):
    created = init_cluster(zk, PATHS)
    assert is_initialised(zk, PATHS)
    for folder in ("IDEALSTATES", "EXTERNALVIEW", "LIVEINSTANCES", "INSTANCES", "PROPERTYSTORE"):
        assert f"/PinotCluster/{folder}" in created
    for kind in ("CLUSTER", "PARTICIPANT", "RESOURCE"):
        assert zk.exists(f"/PinotCluster/CONFIGS/{kind}")
    lead = read_record(zk, PATHS.idealstate("leadControllerResource")).record
    assert lead.simple_fields["NUM_PARTITIONS"] == "24"
    assert lead.simple_fields["STATE_MODEL_DEF_REF"] == "MasterSlave"
    assert lead.simple_fields["REBALANCE_MODE"] == "FULL_AUTO"
    assert sorted(lead.list_fields) == sorted(partition_name(i) for i in range(24))
    enabled = read_record(zk, PATHS.resource_config("leadControllerResource")).record
    assert enabled.simple_fields == {"RESOURCE_ENABLED": "true"}
    model = read_record(zk, PATHS.statemodeldef("SegmentOnlineOfflineStateModel")).record
    assert model.simple_fields["INITIAL_STATE"] == "OFFLINE"
    assert model.list_fields["STATE_PRIORITY_LIST"] == ["ONLINE", "CONSUMING", "OFFLINE", "DROPPED"]
    assert model.map_fields["OFFLINE.next"] == {
        "CONSUMING": "CONSUMING",
        "ONLINE": "ONLINE",
        "DROPPED": "DROPPED",
    }
    assert read_record(zk, PATHS.idealstate("brokerResource")) is not None
    assert init_cluster(zk, PATHS) == []


def test_init_cluster_never_overwrites(zk):
    init_cluster(zk, PATHS, lead_partitions=17)
    init_cluster(zk, PATHS, lead_partitions=24)
    lead = read_record(zk, PATHS.idealstate("leadControllerResource")).record
    assert lead.simple_fields["NUM_PARTITIONS"] == "17"


def test_the_command_is_idempotent(zk, capsys):
    call_command("init_cluster")
    call_command("init_cluster")
    out = capsys.readouterr().out
    assert "created" in out
    assert "already initialised" in out


def test_a_participant_registers_its_config_and_a_live_instance(zk, settings):
    init_cluster(zk, PATHS)
    session = register_participant(
        zk, PATHS, "Server_127.0.0.1_8098", "127.0.0.1", 8098, ["DefaultTenant_REALTIME"], 8097
    )
    config = read_record(zk, PATHS.participant_config("Server_127.0.0.1_8098")).record
    assert config.simple_fields == {
        "HELIX_HOST": "127.0.0.1",
        "HELIX_PORT": "8098",
        "HELIX_ENABLED": "true",
        "adminPort": "8097",
    }
    assert config.list_fields["TAG_LIST"] == ["DefaultTenant_REALTIME"]
    live = read_record(zk, PATHS.liveinstance("Server_127.0.0.1_8098"))
    assert live.record.simple_fields["SESSION_ID"] == session
    assert zk.exists(PATHS.liveinstance("Server_127.0.0.1_8098")).ephemeralOwner == zk.client_id[0]
    assert zk.exists(PATHS.messages("Server_127.0.0.1_8098"))
    # Registering again on the same session changes nothing.
    assert (
        register_participant(
            zk, PATHS, "Server_127.0.0.1_8098", "127.0.0.1", 8098, ["DefaultTenant_REALTIME"], 8097
        )
        == session
    )


def test_a_live_instance_goes_when_its_session_ends(zk, settings):
    init_cluster(zk, PATHS)
    other = new_client(settings.ZK_HOSTS)
    register_participant(other, PATHS, "Server_h_1", "h", 1, ["DefaultTenant_REALTIME"])
    with pytest.raises(NodeExistsError):
        register_participant(zk, PATHS, "Server_h_1", "h", 1, ["DefaultTenant_REALTIME"])
    other.stop()
    other.close()
    assert zk.exists(PATHS.liveinstance("Server_h_1")) is None
    assert zk.exists(PATHS.participant_config("Server_h_1")) is not None
    register_participant(zk, PATHS, "Server_h_1", "h", 1, ["DefaultTenant_REALTIME"])
    assert zk.exists(PATHS.liveinstance("Server_h_1")) is not None
