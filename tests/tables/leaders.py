"""Test helpers: make a table have a lead controller (or not) in a real ZooKeeper chroot.

`lead_every_partition(zk, controller)` registers `controller` as a live participant tagged
`controller` on this client's session (its LIVEINSTANCE goes with the session) and writes the
leadControllerResource EXTERNALVIEW naming it MASTER of every partition, as the cluster leader
would. `write_lead_view(zk, masters)` writes a view naming whom you like (live or not).
The rest write the other lead-controller znodes as the controllers would (for the mirror,
/metrics and leaders-page tests): controller participants live or gone (`controller`),
`/CONTROLLER/LEADER` (`lead`, `resign`), RESOURCE_ENABLED, and `LeadershipChange` rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from tables.domain.leadership import (
    DEFAULT_NUM_PARTITIONS,
    LEAD_CONTROLLER_RESOURCE,
    partition_name,
)
from tables.domain.znrecord import ZNRecord
from tables.models import LeadershipChange
from tables.zk.participants import (
    instance_config,
    live_instance,
    register_participant,
    session_id_of,
)
from tables.zk.records import create_record, read_record, update_record, write_record
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


HOST = "127.0.0.1"


def controller_id(port: int) -> str:
    return f"Controller_{HOST}_{port}"


def controller(zk, port: int, live: bool = True) -> str:
    """A controller participant: registered and live, or only its instance config (it died)."""
    name = controller_id(port)
    if live:
        register_participant(zk, PATHS, name, HOST, port, ["controller"])
    else:
        config = instance_config(name, HOST, port, None, ["controller"])
        create_record(zk, PATHS.participant_config(name), config)
    return name


def set_view(zk, masters: Mapping[int, str], partitions: int = 24) -> None:
    """The resource's EXTERNALVIEW with `masters` (partition -> MASTER), the rest empty."""
    write_lead_view(
        zk,
        {
            partition_name(i): ({masters[i]: "MASTER"} if i in masters else {})
            for i in range(partitions)
        },
    )


def lead(zk, port: int) -> None:
    """`/CONTROLLER/LEADER` as the Helix election writes it: id `<host>_<port>`, ephemeral."""
    create_record(
        zk, PATHS.controller_leader, live_instance(f"{HOST}_{port}", session_id_of(zk)), True
    )


def resign(zk) -> None:
    zk.delete(PATHS.controller_leader)


def set_resource_enabled(zk, enabled: bool) -> None:
    def flip(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.simple_fields["RESOURCE_ENABLED"] = "true" if enabled else "false"
        return out

    update_record(zk, PATHS.resource_config(LEAD_CONTROLLER_RESOURCE), flip)


def moment(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def change(
    partition: int, src: str, dst: str, at_ms: int, reason: str = "", **fields: object
) -> LeadershipChange:
    """A LeadershipChange row as the cluster leader writes it (`dst` blank: MASTER lost)."""
    return LeadershipChange.objects.create(
        partition_id=partition,
        from_controller=src,
        to_controller=dst,
        at=moment(at_ms),
        reason=reason,
        **fields,
    )
