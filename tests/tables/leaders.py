"""Test helpers: make a table have a lead controller (or not) in a real ZooKeeper chroot.

`lead_every_partition(zk, controller)` registers `controller` as a live participant tagged
`controller` on this client's session (its LIVEINSTANCE goes with the session) and writes the
leadControllerResource EXTERNALVIEW naming it MASTER of every partition, as the cluster leader
would. `write_lead_view(zk, masters)` writes a view naming whom you like (live or not).
"""

from __future__ import annotations

from collections.abc import Mapping

from tables.domain.leadership import (
    DEFAULT_NUM_PARTITIONS,
    LEAD_CONTROLLER_RESOURCE,
    partition_name,
)
from tables.domain.znrecord import ZNRecord
from tables.zk.participants import register_participant
from tables.zk.records import create_record, read_record, write_record
from tables.zk.zookeeper import as_store
from tests.cluster_fixtures import PATHS

CONTROLLER = "Controller_127.0.0.1_9000"


def write_lead_view(zk, maps: Mapping[str, Mapping[str, str]]) -> None:
    """The leadControllerResource EXTERNALVIEW with `maps` (partition -> instance -> state)."""
    store = as_store(zk)
    record = ZNRecord(
        id=LEAD_CONTROLLER_RESOURCE,
        simple_fields={"BUCKET_SIZE": "0", "STATE_MODEL_DEF_REF": "MasterSlave"},
        map_fields={p: dict(states) for p, states in maps.items()},
    )
    path = PATHS.externalview(LEAD_CONTROLLER_RESOURCE)
    found = read_record(store, path)
    if found is None:
        create_record(store, path, record)
    else:
        write_record(store, path, record, found.version)


def lead_every_partition(
    zk, controller: str = CONTROLLER, partitions: int = DEFAULT_NUM_PARTITIONS
) -> str:
    """`controller`, live, MASTER of every partition; returns its id."""
    host, port = controller.removeprefix("Controller_").rsplit("_", 1)
    register_participant(as_store(zk), PATHS, controller, host, int(port), ["controller"])
    write_lead_view(zk, {partition_name(i): {controller: "MASTER"} for i in range(partitions)})
    return controller
