"""Helix messages: the znodes under `/<c>/INSTANCES/<instance>/MESSAGES` (reference §1.4, §4.5).

This module is the only code that creates, reads, changes or deletes message znodes.

Contract:
- A message is a ZNRecord whose id is its `MSG_ID` (a UUID); its simpleFields hold Helix's
  attributes (`MSG_ID`, `MSG_TYPE`, `MSG_SUBTYPE`, `MSG_STATE` = `new`, `CREATE_TIMESTAMP`,
  `SRC_NAME`, `SRC_INSTANCE_TYPE`, `SRC_CLUSTER`, `TGT_NAME`, `TGT_SESSION_ID`, `RESOURCE_NAME`,
  `TIMEOUT`, `RETRY_COUNT`) plus the fields of the message itself. Pinot's FORCE_COMMIT message
  (`ForceCommitMessage`) is `MSG_TYPE` = `USER_DEFINE_MSG`, `MSG_SUBTYPE` = `FORCE_COMMIT`,
  `TIMEOUT` = `-1`, `tableName` = the table with type, `segmentNames` = the names joined by ",".
  `PARTITION_NAME` is left out: Pinot's recipient criteria leave the partition unset.
- A Helix reset (`PHRM.resetPartitionAllState`, reference round 2 §A.7) is a `STATE_TRANSITION`
  message (no subtype) for one replica: `PARTITION_NAME` = the segment, `RESOURCE_NAME` = the
  table, `FROM_STATE` = its current state, `TO_STATE` = the state model's initial state
  (`OFFLINE`), `STATE_MODEL_DEF` = `SegmentOnlineOfflineStateModel`, `STATE_MODEL_FACTORY_NAME` =
  `DEFAULT`, `TGT_SESSION_ID` = the live instance's session, `SRC_NAME` = `<host>-ADMIN`.
  `pending_state_transition` is Pinot's guard: a reset is refused while any STATE_TRANSITION
  message for the same session, resource and partition is still in the instance's folder.
- `send_message` creates the znode and never overwrites one (ids are fresh UUIDs).
- The recipient: `mark_read` sets `MSG_STATE` = `read`, `READ_TIMESTAMP` and `EXE_SESSION_ID` with
  compare-and-set (as Helix's executor does before it handles a message), `delete_message` removes
  the message once handled. Both are idempotent: a message already gone is not an error.
- `watch_messages` puts a children watch (`tables.zk.watches`) on an instance's MESSAGES folder
  (which must exist; participant registration creates it). The callback gets the sorted message
  ids after every change, on kazoo's callback thread: it must return quickly, and returns False to
  stop watching.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kazoo.exceptions import NoNodeError

from tables.domain.znrecord import ZNRecord, ZNRecordError
from tables.zk.interface import ZkStore
from tables.zk.paths import ClusterPaths
from tables.zk.records import create_record, read_record, update_record
from tables.zk.watches import Watch, watch_children

__all__ = [
    "FORCE_COMMIT",
    "FROM_STATE",
    "MSG_SUBTYPE",
    "MSG_TYPE",
    "PARTITION_NAME",
    "RESOURCE_NAME",
    "SEGMENT_NAMES",
    "STATE_MODEL_DEF",
    "STATE_MODEL_FACTORY_NAME",
    "STATE_TRANSITION",
    "TABLE_NAME",
    "TGT_SESSION_ID",
    "TO_STATE",
    "USER_DEFINE_MSG",
    "ForceCommitRequest",
    "StateTransitionRequest",
    "delete_message",
    "force_commit_message",
    "mark_read",
    "message_ids",
    "new_message",
    "parse_force_commit",
    "parse_state_transition",
    "pending_state_transition",
    "read_message",
    "send_message",
    "state_transition_message",
    "watch_messages",
]

MSG_ID = "MSG_ID"
MSG_TYPE = "MSG_TYPE"
MSG_SUBTYPE = "MSG_SUBTYPE"
MSG_STATE = "MSG_STATE"
CREATE_TIMESTAMP = "CREATE_TIMESTAMP"
READ_TIMESTAMP = "READ_TIMESTAMP"
EXE_SESSION_ID = "EXE_SESSION_ID"
SRC_NAME = "SRC_NAME"
SRC_INSTANCE_TYPE = "SRC_INSTANCE_TYPE"
SRC_CLUSTER = "SRC_CLUSTER"
TGT_NAME = "TGT_NAME"
TGT_SESSION_ID = "TGT_SESSION_ID"
RESOURCE_NAME = "RESOURCE_NAME"
TIMEOUT = "TIMEOUT"
RETRY_COUNT = "RETRY_COUNT"
PARTITION_NAME = "PARTITION_NAME"
FROM_STATE = "FROM_STATE"
TO_STATE = "TO_STATE"
STATE_MODEL_DEF = "STATE_MODEL_DEF"
STATE_MODEL_FACTORY_NAME = "STATE_MODEL_FACTORY_NAME"

USER_DEFINE_MSG = "USER_DEFINE_MSG"
FORCE_COMMIT = "FORCE_COMMIT"
STATE_TRANSITION = "STATE_TRANSITION"
SEGMENT_STATE_MODEL = "SegmentOnlineOfflineStateModel"
DEFAULT_FACTORY = "DEFAULT"
OFFLINE = "OFFLINE"
TABLE_NAME = "tableName"
SEGMENT_NAMES = "segmentNames"
STATE_NEW, STATE_READ = "new", "read"
PARTICIPANT = "PARTICIPANT"


def new_message(
    msg_type: str,
    subtype: str | None,
    *,
    source: str,
    cluster: str,
    target: str,
    target_session: str | None,
    resource: str | None,
    now_ms: int,
    fields: dict[str, str] | None = None,
    timeout_ms: int = -1,
    msg_id: str | None = None,
) -> ZNRecord:
    """A Helix message addressed to `target` (on `target_session` when given)."""
    msg_id = msg_id or str(uuid.uuid4())
    simple = {
        MSG_ID: msg_id,
        MSG_TYPE: msg_type,
        MSG_STATE: STATE_NEW,
        CREATE_TIMESTAMP: str(now_ms),
        SRC_NAME: source,
        SRC_INSTANCE_TYPE: PARTICIPANT,
        SRC_CLUSTER: cluster,
        TGT_NAME: target,
        TIMEOUT: str(timeout_ms),
        RETRY_COUNT: "0",
    }
    if subtype is not None:
        simple[MSG_SUBTYPE] = subtype
    if target_session:
        simple[TGT_SESSION_ID] = target_session
    if resource:
        simple[RESOURCE_NAME] = resource
    simple.update(fields or {})
    return ZNRecord(id=msg_id, simple_fields=simple)


def force_commit_message(
    table: str,
    segments: Iterable[str],
    *,
    source: str,
    cluster: str,
    target: str,
    target_session: str | None,
    now_ms: int,
    msg_id: str | None = None,
) -> ZNRecord:
    """Pinot's FORCE_COMMIT message for `segments` of `table` (with type)."""
    return new_message(
        USER_DEFINE_MSG,
        FORCE_COMMIT,
        source=source,
        cluster=cluster,
        target=target,
        target_session=target_session,
        resource=table,
        now_ms=now_ms,
        fields={TABLE_NAME: table, SEGMENT_NAMES: ",".join(sorted(set(segments)))},
        msg_id=msg_id,
    )


@dataclass(frozen=True)
class ForceCommitRequest:
    table: str
    segments: tuple[str, ...]


def parse_force_commit(record: ZNRecord) -> ForceCommitRequest | None:
    """The FORCE_COMMIT request a message carries, or None when it is another kind of message."""
    simple = record.simple_fields
    if simple.get(MSG_TYPE) != USER_DEFINE_MSG or simple.get(MSG_SUBTYPE) != FORCE_COMMIT:
        return None
    names = [n.strip() for n in simple.get(SEGMENT_NAMES, "").split(",")]
    return ForceCommitRequest(simple.get(TABLE_NAME, ""), tuple(n for n in names if n))


def state_transition_message(
    table: str,
    segment: str,
    *,
    target: str,
    target_session: str,
    from_state: str,
    to_state: str = OFFLINE,
    source: str,
    cluster: str,
    now_ms: int,
    msg_id: str | None = None,
) -> ZNRecord:
    """Helix's STATE_TRANSITION of `segment` of `table` on `target` (a reset, by default)."""
    return new_message(
        STATE_TRANSITION,
        None,
        source=source,
        cluster=cluster,
        target=target,
        target_session=target_session,
        resource=table,
        now_ms=now_ms,
        fields={
            PARTITION_NAME: segment,
            FROM_STATE: from_state,
            TO_STATE: to_state,
            STATE_MODEL_DEF: SEGMENT_STATE_MODEL,
            STATE_MODEL_FACTORY_NAME: DEFAULT_FACTORY,
        },
        msg_id=msg_id,
    )


@dataclass(frozen=True)
class StateTransitionRequest:
    table: str
    segment: str
    from_state: str
    to_state: str
    session: str  # the target session ("" when the message names none)


def parse_state_transition(record: ZNRecord) -> StateTransitionRequest | None:
    """The transition a STATE_TRANSITION message asks for, or None when it is another kind of
    message or lacks its resource, partition or target state."""
    simple = record.simple_fields
    if simple.get(MSG_TYPE) != STATE_TRANSITION:
        return None
    table, segment = simple.get(RESOURCE_NAME, ""), simple.get(PARTITION_NAME, "")
    to_state = simple.get(TO_STATE, "")
    if not table or not segment or not to_state:
        return None
    return StateTransitionRequest(
        table, segment, simple.get(FROM_STATE, ""), to_state, simple.get(TGT_SESSION_ID, "")
    )


# --- ZooKeeper ----------------------------------------------------------------------------------
def send_message(client: ZkStore, paths: ClusterPaths, record: ZNRecord) -> str:
    """Create the message znode under its `TGT_NAME`'s MESSAGES folder; returns its path."""
    target = record.simple_fields[TGT_NAME]
    path = paths.message(target, record.id)
    create_record(client, path, record)
    return path


def message_ids(client: ZkStore, paths: ClusterPaths, instance: str) -> list[str]:
    """The ids of the messages waiting for `instance`, sorted ([] when it has no folder)."""
    try:
        return sorted(client.get_children(paths.messages(instance)))
    except NoNodeError:
        return []


def read_message(
    client: ZkStore, paths: ClusterPaths, instance: str, msg_id: str
) -> ZNRecord | None:
    """The message, or None when it is gone. An unreadable znode raises ZNRecordError."""
    found = read_record(client, paths.message(instance, msg_id))
    return None if found is None else found.record


def mark_read(
    client: ZkStore,
    paths: ClusterPaths,
    instance: str,
    msg_id: str,
    session: str,
    now_ms: int,
) -> bool:
    """`MSG_STATE` = read (compare-and-set); False when the message is gone."""

    def read(record: ZNRecord) -> ZNRecord | None:
        if record.simple_fields.get(MSG_STATE) == STATE_READ:
            return None
        out = record.copy()
        out.simple_fields[MSG_STATE] = STATE_READ
        out.simple_fields[READ_TIMESTAMP] = str(now_ms)
        out.simple_fields[EXE_SESSION_ID] = session
        return out

    try:
        update_record(client, paths.message(instance, msg_id), read)
    except NoNodeError:
        return False
    return True


def delete_message(client: ZkStore, paths: ClusterPaths, instance: str, msg_id: str) -> bool:
    """Remove the message; False when it was gone already."""
    try:
        client.delete(paths.message(instance, msg_id))
    except NoNodeError:
        return False
    return True


def pending_state_transition(
    client: ZkStore, paths: ClusterPaths, instance: str, session: str, table: str, segment: str
) -> bool:
    """Is a STATE_TRANSITION of `segment` of `table` for `session` still waiting in `instance`'s
    MESSAGES (read or not)? Pinot refuses to reset the replica then. Unreadable messages and
    messages deleted during the walk are skipped."""
    for msg_id in message_ids(client, paths, instance):
        try:
            record = read_message(client, paths, instance, msg_id)
        except ZNRecordError:
            continue
        request = None if record is None else parse_state_transition(record)
        if (
            request is not None
            and request.session == session
            and request.table == table
            and request.segment == segment
        ):
            return True
    return False


def watch_messages(
    client: ZkStore,
    paths: ClusterPaths,
    instance: str,
    callback: Callable[[list[str]], bool | None],
) -> Watch:
    """Call `callback(sorted ids)` now and after every change of `instance`'s MESSAGES."""
    return watch_children(
        client, paths.messages(instance), lambda children: callback(sorted(children))
    )
