"""The completion path's hot reads, answered from memory until ZooKeeper says they changed.

Every protocol call of a commit (segmentConsumed, commit start, commit end) and every consumer
start needs the table's config, and a commit also the servers of the table's tag and the cluster
config's completion-time guard. Read from ZooKeeper each time, they are a round trip and a parse
apiece, serialised with the commit's writes on the process's one session: a pause of 64
partitions paid them 64 to 128 times over, and a pauseless commit's freshness gap waited for them.

Contract:
- `HotReads(client, paths)` over one `tables.zk.watched_reads.WatchedReads` (the staleness rules
  are its own: never stale after this session's own write; another session's change is seen once
  its notification arrives, a few milliseconds). Keep one per process and client;
  `reads_through(client)` says whether a client is this one's session.
- `table_config(table)` (name with type) is parsed once per znode version (by `mzxid`, so a table
  deleted and created again is never answered from the old parse); `NotFound` when missing.
- `tagged_instances(tag)`: the participants whose instance config carries `tag`, sorted (as
  `ClusterReader.tagged_instances`).
- `cluster_simple_field(key)`: a simple field of the cluster config, or None.
- `idealstate(table, fresh, stale_ok_s)`: the table's IdealState record, or None when missing
  (`fresh` and `stale_ok_s` as `WatchedReads.data`); `last_idealstate(table)` is the one parsed
  last, without any I/O (None when none was).
- Each znode version is parsed once, however many threads find it new at once (a pause's burst
  of calls, each after another commit's IdealState write).
- `HotReads.reuse(hot, ctx)`: `hot` when it reads through `ctx`'s client, else a new one.
- Thread-safe; the lock is never held across I/O. Parsed values are shared: callers must not
  mutate them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from tables.domain.names import raw_table_name
from tables.domain.table_config import TableConfig, table_config_from_znrecord
from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.paths import ClusterPaths
from tables.zk.watched_reads import WatchedReads

from .context import ClusterContext
from .errors import NotFound

__all__ = ["HotReads"]

_T = TypeVar("_T")


class HotReads:
    def __init__(self, client: Any, paths: ClusterPaths) -> None:
        self.reads = WatchedReads(client)
        self.paths = paths
        self._lock = threading.Lock()
        self._parsed: dict[str, tuple[tuple[int, int], Any]] = {}  # path -> (stamp, value)
        self._parsing: dict[str, threading.Lock] = {}  # path -> held while one thread parses it

    @classmethod
    def reuse(cls, hot: HotReads | None, ctx: ClusterContext) -> HotReads:
        """`hot` when it reads through `ctx.client`'s session, else a new one for it."""
        if hot is not None and hot.reads_through(ctx.client):
            return hot
        return cls(ctx.client, ctx.paths)

    def reads_through(self, client: Any) -> bool:
        return self.reads.reads_through(client)

    def idealstate(
        self, table: str, fresh: bool = False, stale_ok_s: float = 0.0
    ) -> ZNRecord | None:
        return self._parse(self.paths.idealstate(table), _same, fresh, stale_ok_s)

    def last_idealstate(self, table: str) -> ZNRecord | None:
        with self._lock:
            cached = self._parsed.get(self.paths.idealstate(table))
        return None if cached is None else cached[1]

    def table_config(self, table: str) -> TableConfig:
        config = self._parse(self.paths.table_config(table), table_config_from_znrecord)
        if config is None:
            raise NotFound(f"table {raw_table_name(table)} not found")
        return config

    def tagged_instances(self, tag: str) -> list[str]:
        folder = self.paths.participant_configs
        found = []
        for instance in self.reads.children(folder):
            record = self._parse(self.paths.participant_config(instance), _same)
            if record is not None and tag in record.list_fields.get("TAG_LIST", []):
                found.append(instance)
        return sorted(found)

    def cluster_simple_field(self, key: str) -> str | None:
        record = self._parse(self.paths.cluster_config, _same)
        return None if record is None else record.simple_fields.get(key)

    def _parse(
        self,
        path: str,
        parse: Callable[[ZNRecord], _T],
        fresh: bool = False,
        stale_ok_s: float = 0.0,
    ) -> _T | None:
        """`parse` of the znode's record, once per version; None when the znode is missing."""
        found = self.reads.data(path, fresh, stale_ok_s)
        if found is None:
            return None
        data, stat = found
        stamp = (getattr(stat, "mzxid", 0), stat.version)
        with self._lock:
            cached = self._parsed.get(path)
            parsing = self._parsing.setdefault(path, threading.Lock())
        if cached is not None and cached[0] == stamp:
            return cached[1]
        with parsing:
            with self._lock:
                cached = self._parsed.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]  # parsed by the thread this one waited for
            value = parse(codec.decode(data))
            with self._lock:
                self._parsed[path] = (stamp, value)
            return value


def _same(record: ZNRecord) -> ZNRecord:
    return record
