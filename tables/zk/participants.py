"""Helix participants: the instance config (persistent) and the live instance (ephemeral).

`register_participant` is idempotent: the instance config is created or brought up to date with
compare-and-set, the INSTANCES/<id> folders are ensured, and the live instance is created on this
client's session (an ephemeral znode disappears when the session ends, which is how the cluster
learns that a server died). A live instance left over from an older session of the same id is
replaced only once ZooKeeper has expired that session.
"""

from __future__ import annotations

import os
import socket

from kazoo.exceptions import NodeExistsError, NoNodeError

from tables.domain.znrecord import ZNRecord
from tables.zk.errors import NodeExists
from tables.zk.interface import ZkStore
from tables.zk.paths import ClusterPaths
from tables.zk.records import create_record, read_record, update_record

__all__ = ["instance_config", "live_instance", "register_participant", "session_id_of"]

HELIX_VERSION = "1.4.1"  # the Helix line that Pinot 1.x ships with


def session_id_of(client: ZkStore) -> str:
    """The session id as Helix writes it: lowercase hex without a 0x prefix."""
    return f"{client.client_id[0]:x}"


def instance_config(
    instance_id: str, host: str, port: int, admin_port: int | None, tags: list[str]
) -> ZNRecord:
    simple = {"HELIX_HOST": host, "HELIX_PORT": str(port), "HELIX_ENABLED": "true"}
    if admin_port is not None:
        simple["adminPort"] = str(admin_port)
    return ZNRecord(id=instance_id, simple_fields=simple, list_fields={"TAG_LIST": list(tags)})


def live_instance(instance_id: str, session_id: str) -> ZNRecord:
    return ZNRecord(
        id=instance_id,
        simple_fields={
            "HELIX_VERSION": HELIX_VERSION,
            "LIVE_INSTANCE": f"{os.getpid()}@{socket.gethostname()}",
            "SESSION_ID": session_id,
        },
    )


def register_participant(
    client: ZkStore,
    paths: ClusterPaths,
    instance_id: str,
    host: str,
    port: int,
    tags: list[str],
    admin_port: int | None = None,
) -> str:
    """Register `instance_id` on this client's session; returns the session id."""
    wanted = instance_config(instance_id, host, port, admin_port, tags)
    config_path = paths.participant_config(instance_id)
    try:
        create_record(client, config_path, wanted)
    except NodeExistsError:

        def refresh(record: ZNRecord) -> ZNRecord | None:
            merged = record.copy()
            # HELIX_ENABLED is the operator's (PUT /instances/{id}/state): a restart keeps it.
            merged.simple_fields.update(
                {k: v for k, v in wanted.simple_fields.items() if k != "HELIX_ENABLED"}
            )
            merged.list_fields["TAG_LIST"] = wanted.list_fields["TAG_LIST"]
            return None if merged == record else merged

        update_record(client, config_path, refresh)
    for folder in ("CURRENTSTATES", "ERRORS", "HEALTHREPORT", "MESSAGES", "STATUSUPDATES"):
        client.ensure_path(f"{paths.instance(instance_id)}/{folder}")

    session = session_id_of(client)
    live_path = paths.liveinstance(instance_id)
    existing = read_record(client, live_path)
    if existing is not None and existing.record.simple_fields.get("SESSION_ID") == session:
        return session
    if existing is not None:
        # Another session holds the id; it is ours to take only when that session is gone.
        raise NodeExists(f"{instance_id} is live on session {existing.record.simple_fields}")
    try:
        create_record(client, live_path, live_instance(instance_id, session), ephemeral=True)
    except NoNodeError:
        client.ensure_path(paths.liveinstances)
        create_record(client, live_path, live_instance(instance_id, session), ephemeral=True)
    return session
