"""A server's CURRENTSTATES/<session>/<table> znodes (mapFields segment -> CURRENT_STATE).

Contract:
- `publish(table)` writes the table's states as `states(table)` gives them when the write starts,
  compare-and-set (created when missing; left alone when equal), and returns once they are in
  ZooKeeper, or raises as the write did. Without a session (`session()` is None) nothing is
  written: registering on a session publishes every table again.
- Overlapping calls coalesce: a call that waited while a write that started after the call went
  out returns without writing again, since that write carried the states the call was made for
  (its caller changed them before calling). A burst of transitions of one table costs a few writes
  instead of one each, every one of which had to read, compare and re-encode the whole record.
- A write that raised covers nobody: the calls waiting behind it write themselves.
- The server is the znode's only writer, so after a write it knows the znode: the next write of
  that table is a compare-and-set on the version it wrote, without reading and decoding the
  record first (equal states: no write at all). Losing that race (someone else wrote, or
  deleted it) drops what it knew and writes as the first time: read, compare, set. On a table of
  a thousand segments the read and decode were half of every write, and a pause of 64
  partitions makes a burst of them on every server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tables.cluster.context import ClusterContext
from tables.domain.znrecord import ZNRecord
from tables.zk.errors import BadVersion, NodeExists, NoNode
from tables.zk.records import create_record, update_record, write_record

__all__ = ["STATE_MODEL", "CurrentStatesWriter"]

STATE_MODEL = "SegmentOnlineOfflineStateModel"

States = dict[str, dict[str, str]]


class CurrentStatesWriter:
    def __init__(
        self,
        instance_id: str,
        ctx: Callable[[], ClusterContext],
        session: Callable[[], str | None],
        states: Callable[[str], States],
        on_race: Callable[[], None],
    ) -> None:
        """`on_race`: called when the znode appeared between a read and the create (the next
        reconcile round writes again)."""
        self.instance_id = instance_id
        self._ctx, self._session, self._states, self._on_race = ctx, session, states, on_race
        self._count_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._asked: dict[str, int] = {}  # per table: calls so far
        self._covered: dict[str, int] = {}  # per table: calls the last good write carried
        # per table, once written or read: (path, version, its mapFields), under _write_lock
        self._known: dict[str, tuple[str, int, States]] = {}

    def publish(self, table: str) -> None:
        with self._count_lock:
            asked = self._asked[table] = self._asked.get(table, 0) + 1
        with self._write_lock:
            if self._covered.get(table, 0) >= asked:
                return  # a write that started after this call carried its states
            with self._count_lock:
                covering = self._asked[table]
            self._write(table)
            self._covered[table] = covering

    def _write(self, table: str) -> None:
        session = self._session()
        if session is None:
            return
        ctx = self._ctx()
        path = ctx.paths.currentstate(self.instance_id, session, table)
        states = self._states(table)
        known = self._known.pop(table, None)
        if known is not None and known[0] == path:
            if known[2] == states:
                self._known[table] = known
                return
            try:
                version = write_record(
                    ctx.client, path, _record(table, session, None, states), known[1]
                )
                self._known[table] = (path, version, states)
                return
            except (BadVersion, NoNode):
                pass  # written or deleted by someone else: read it, as the first time
        try:
            found = update_record(
                ctx.client, path, lambda record: _record(table, session, record, states)
            )
            self._known[table] = (path, found.version, found.record.map_fields)
        except NoNode:
            if states:
                try:
                    create_record(ctx.client, path, _record(table, session, None, states))
                except NodeExists:
                    self._on_race()


def _record(table: str, session: str, record: ZNRecord | None, states: States) -> ZNRecord | None:
    if record is not None and record.map_fields == states:
        return None
    return ZNRecord(
        id=table,
        simple_fields={
            "BUCKET_SIZE": "0",
            "SESSION_ID": session,
            "STATE_MODEL_DEF": STATE_MODEL,
            "STATE_MODEL_FACTORY_NAME": "DEFAULT",
        },
        map_fields=states,
    )
