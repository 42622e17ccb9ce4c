"""Writing the lead controller resource's znodes as the controllers would (Helix layout), for the
mirror, /metrics and leaders-page tests: controller participants live or gone, the resource's
ExternalView, `/CONTROLLER/LEADER` and RESOURCE_ENABLED. All under the test's ZooKeeper chroot,
through `tables.zk.records`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.znrecord import ZNRecord
from tables.models import LeadershipChange
from tables.zk.participants import (
    instance_config,
    live_instance,
    register_participant,
    session_id_of,
)
from tables.zk.records import create_record, update_record
from tests.cluster_fixtures import PATHS

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
    view = ZNRecord(
        id=LEAD_CONTROLLER_RESOURCE,
        simple_fields={"BUCKET_SIZE": "0", "STATE_MODEL_DEF_REF": "MasterSlave"},
        map_fields={
            partition_name(i): ({masters[i]: "MASTER"} if i in masters else {})
            for i in range(partitions)
        },
    )
    path = PATHS.externalview(LEAD_CONTROLLER_RESOURCE)
    if zk.exists(path) is None:
        create_record(zk, path, view)
    else:
        update_record(zk, path, lambda _: view)


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
