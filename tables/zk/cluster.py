"""The cluster skeleton Helix and Pinot create (reference §1.1, §1.6, §8), written idempotently.

`init_cluster` creates what is missing and never overwrites what exists, so it is safe to run
against a live cluster, including one that a real Pinot created.
"""

from __future__ import annotations

from kazoo.exceptions import NodeExistsError

from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.znrecord import ZNRecord
from tables.zk.interface import ZkStore
from tables.zk.paths import ClusterPaths
from tables.zk.records import create_record

__all__ = ["init_cluster", "is_initialised"]

SEGMENT_MODEL = "SegmentOnlineOfflineStateModel"
BROKER_MODEL = "BrokerResourceOnlineOfflineStateModel"
MASTER_SLAVE = "MasterSlave"
BROKER_RESOURCE = "brokerResource"


def _state_model(
    name: str, initial: str, states: dict[str, str], transitions: list[str]
) -> ZNRecord:
    """A Helix StateModelDefinition: states in priority order with their count bounds, and the
    allowed transitions (each also the direct next hop from its source)."""
    maps: dict[str, dict[str, str]] = {
        f"{state}.meta": {"count": count} for state, count in states.items()
    }
    for transition in transitions:
        source, target = transition.split("-")
        maps.setdefault(f"{source}.next", {})[target] = target
    return ZNRecord(
        id=name,
        simple_fields={"INITIAL_STATE": initial},
        map_fields=maps,
        list_fields={
            "STATE_PRIORITY_LIST": list(states),
            "STATE_TRANSITION_PRIORITYLIST": transitions,
        },
    )


def segment_state_model() -> ZNRecord:
    return _state_model(
        SEGMENT_MODEL,
        "OFFLINE",
        {"ONLINE": "R", "CONSUMING": "R", "OFFLINE": "-1", "DROPPED": "-1"},
        [
            "OFFLINE-DROPPED",
            "CONSUMING-DROPPED",
            "ONLINE-DROPPED",
            "ONLINE-OFFLINE",
            "OFFLINE-CONSUMING",
            "OFFLINE-ONLINE",
            "CONSUMING-ONLINE",
            "CONSUMING-OFFLINE",
        ],
    )


def master_slave_model() -> ZNRecord:
    return _state_model(
        MASTER_SLAVE,
        "OFFLINE",
        {"MASTER": "1", "SLAVE": "R", "OFFLINE": "-1", "DROPPED": "-1"},
        ["MASTER-SLAVE", "SLAVE-MASTER", "OFFLINE-SLAVE", "SLAVE-OFFLINE", "OFFLINE-DROPPED"],
    )


def broker_state_model() -> ZNRecord:
    return _state_model(
        BROKER_MODEL,
        "OFFLINE",
        {"ONLINE": "R", "OFFLINE": "-1", "DROPPED": "-1"},
        ["OFFLINE-ONLINE", "ONLINE-OFFLINE", "OFFLINE-DROPPED", "ONLINE-DROPPED"],
    )


def lead_controller_idealstate(num_partitions: int) -> ZNRecord:
    names = [partition_name(i) for i in range(num_partitions)]
    return ZNRecord(
        id=LEAD_CONTROLLER_RESOURCE,
        simple_fields={
            "IDEAL_STATE_MODE": "AUTO_REBALANCE",
            "REBALANCE_MODE": "FULL_AUTO",
            "NUM_PARTITIONS": str(num_partitions),
            "REPLICAS": "1",
            "MIN_ACTIVE_REPLICAS": "0",
            "STATE_MODEL_DEF_REF": MASTER_SLAVE,
            "STATE_MODEL_FACTORY_NAME": "DEFAULT",
            "INSTANCE_GROUP_TAG": "controller",
            "REBALANCE_STRATEGY": (
                "org.apache.helix.controller.rebalancer.strategy.AutoRebalanceStrategy"
            ),
            "REBALANCE_DELAY": "300000",
            "DELAY_REBALANCE_ENABLED": "true",
        },
        map_fields={name: {} for name in names},
        list_fields={name: [] for name in names},
    )


def broker_resource_idealstate() -> ZNRecord:
    return ZNRecord(
        id=BROKER_RESOURCE,
        simple_fields={
            "IDEAL_STATE_MODE": "CUSTOMIZED",
            "REBALANCE_MODE": "CUSTOMIZED",
            "NUM_PARTITIONS": "0",
            "REPLICAS": "0",
            "STATE_MODEL_DEF_REF": BROKER_MODEL,
            "STATE_MODEL_FACTORY_NAME": "DEFAULT",
        },
    )


def _records(paths: ClusterPaths, lead_partitions: int) -> list[tuple[str, ZNRecord]]:
    cluster = paths.cluster
    return [
        (
            paths.cluster_config,
            ZNRecord(id=cluster, simple_fields={"allowParticipantAutoJoin": "true"}),
        ),
        (paths.statemodeldef(SEGMENT_MODEL), segment_state_model()),
        (paths.statemodeldef(MASTER_SLAVE), master_slave_model()),
        (paths.statemodeldef(BROKER_MODEL), broker_state_model()),
        (paths.idealstate(BROKER_RESOURCE), broker_resource_idealstate()),
        (paths.idealstate(LEAD_CONTROLLER_RESOURCE), lead_controller_idealstate(lead_partitions)),
        (
            paths.resource_config(LEAD_CONTROLLER_RESOURCE),
            ZNRecord(id=LEAD_CONTROLLER_RESOURCE, simple_fields={"RESOURCE_ENABLED": "true"}),
        ),
    ]


def init_cluster(client: ZkStore, paths: ClusterPaths, lead_partitions: int = 24) -> list[str]:
    """Create the missing parts of the skeleton; returns the paths it created."""
    created: list[str] = []
    folders = [
        paths.idealstates,
        paths.externalviews,
        paths.liveinstances,
        paths.instances,
        paths.participant_configs,
        f"{paths.configs}/CLUSTER",
        f"{paths.configs}/RESOURCE",
        paths.statemodeldefs,
        f"{paths.controller}/MESSAGES",
        f"{paths.controller}/HISTORY",
        paths.propertystore,
        paths.table_configs,
        paths.schemas,
        f"{paths.propertystore}/SEGMENTS",
    ]
    for folder in folders:
        if client.exists(folder) is None:
            client.ensure_path(folder)
            created.append(folder)
    for path, record in _records(paths, lead_partitions):
        try:
            create_record(client, path, record)
        except NodeExistsError:
            continue
        created.append(path)
    return created


def is_initialised(client: ZkStore, paths: ClusterPaths) -> bool:
    return client.exists(paths.idealstate(LEAD_CONTROLLER_RESOURCE)) is not None
