"""A synthetic Pinot cluster in ZooKeeper, for benchmarks of what reads it (the mirror, pages).

    write_cluster(client, paths, tables=1000)   # into the (fresh) chroot of `client`
    delete_tree(client, "/")                    # remove it again, fast

Layout (reference §1-§3, §8): the cluster skeleton (`tables.zk.cluster.init_cluster`), `servers`
fake servers `Server_10.0.0.<i>_8098` (instance config with tag DefaultTenant_REALTIME and an
adminPort, live instance), one controller `Controller_127.0.0.1_9000` MASTER of every
leadControllerResource partition in its ExternalView, and `tables` REALTIME tables
`synth<NNNN>_REALTIME`, each with its table config (Pinot's githubEvents example pointed at the
redis stream), `partitions` stream partitions x `segments` LLC segments: the last of each partition
CONSUMING (metadata IN_PROGRESS), the others ONLINE and DONE; `replication` replicas per
partition, round-robin over the servers; the ExternalView equal to the IdealState.

Every znode is written with asynchronous creates, pipelined in windows of WINDOW requests, so a
1,000-table cluster (about 165,000 znodes) takes seconds rather than minutes. Live instances are
ephemeral: they belong to `client`'s session.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError, NotEmptyError  # noqa: E402

from tables.domain.idealstate import finalize_for_write, new_realtime_idealstate  # noqa: E402
from tables.domain.lead_assignment import lead_view  # noqa: E402
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE  # noqa: E402
from tables.domain.names import LLCSegmentName, format_creation_time  # noqa: E402
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata  # noqa: E402
from tables.domain.table_config import (  # noqa: E402
    parse_table_config,
    switch_stream_type,
    table_config_to_znrecord,
)
from tables.domain.znrecord import ZNRecord  # noqa: E402
from tables.zk import codec  # noqa: E402
from tables.zk.cluster import init_cluster  # noqa: E402
from tables.zk.participants import instance_config, live_instance  # noqa: E402
from tables.zk.paths import ClusterPaths  # noqa: E402

__all__ = ["SyntheticCluster", "delete_tree", "write_cluster"]

FIXTURES = Path(os.environ.get("PINOT_FIXTURES", ROOT.parent / "shared" / "fixtures" / "pinot"))
WINDOW = 4000
CONTROLLER = "Controller_127.0.0.1_9000"
ROWS_PER_SEGMENT = 100_000
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class SyntheticCluster:
    tables: list[str]
    servers: list[str]
    znodes: int


class Pipeline:
    """Asynchronous requests in flight, collected WINDOW at a time."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client
        self.pending: list = []
        self.count = 0

    def add(self, call: Callable[..., object], *args: object, **kwargs: object) -> None:
        self.pending.append(call(*args, **kwargs))
        self.count += 1
        if len(self.pending) >= WINDOW:
            self.flush()

    def flush(self) -> None:
        for result in self.pending:
            result.get()
        self.pending = []


def _table_config(raw: str) -> ZNRecord:
    rest = json.loads((FIXTURES / "githubEvents_realtime_table_config.json").read_text())
    rest = switch_stream_type(rest, "redis", f"{raw}-events", {})
    rest["tableName"] = raw
    rest["segmentsConfig"]["replication"] = "2"
    rest["segmentsConfig"]["schemaName"] = "githubEvents"
    return table_config_to_znrecord(parse_table_config(rest))


def _metadata(name: str, partition: int, sequence: int, consuming: bool, created: int) -> bytes:
    start = sequence * ROWS_PER_SEGMENT
    if consuming:
        meta = SegmentZKMetadata(
            segment_name=name,
            status=SegmentStatus.IN_PROGRESS,
            start_offset=str(start),
            num_replicas=2,
            flush_threshold_size=ROWS_PER_SEGMENT,
            creation_time=created,
        )
    else:
        meta = SegmentZKMetadata(
            segment_name=name,
            status=SegmentStatus.DONE,
            start_offset=str(start),
            end_offset=str(start + ROWS_PER_SEGMENT),
            num_replicas=2,
            flush_threshold_size=ROWS_PER_SEGMENT,
            creation_time=created,
            start_time=created,
            end_time=created + HOUR_MS,
            time_unit="MILLISECONDS",
            total_docs=ROWS_PER_SEGMENT,
            crc=1_000_000 + partition * 100 + sequence,
            data_crc=2_000_000 + partition * 100 + sequence,
            use_data_crc=True,
            index_version="v3",
            size_in_bytes=25_000_000,
            download_url=f"file:///deepstore/{name.split('__')[0]}/{name}",
        )
    return codec.encode(meta.to_znrecord())


def _table(
    raw: str, partitions: int, segments: int, replicas: list[list[str]], now_ms: int
) -> tuple[ZNRecord, list[tuple[str, bytes]]]:
    """The IdealState of one table and its segments' metadata."""
    ideal = new_realtime_idealstate(f"{raw}_REALTIME", len(replicas[0]))
    metadata = []
    for partition in range(partitions):
        servers = replicas[partition % len(replicas)]
        for sequence in range(segments):
            created = now_ms - (segments - sequence) * HOUR_MS
            name = str(LLCSegmentName(raw, partition, sequence, format_creation_time(created)))
            consuming = sequence == segments - 1
            state = "CONSUMING" if consuming else "ONLINE"
            ideal.map_fields[name] = {server: state for server in servers}
            metadata.append((name, _metadata(name, partition, sequence, consuming, created)))
    return finalize_for_write(ideal), metadata


def write_cluster(
    client: KazooClient,
    paths: ClusterPaths,
    tables: int = 1000,
    partitions: int = 16,
    segments: int = 10,
    replication: int = 2,
    servers: int = 6,
    now_ms: int = 1_714_563_100_000,
) -> SyntheticCluster:
    """Write the synthetic cluster described in the module docstring."""
    init_cluster(client, paths)
    pipe = Pipeline(client)
    server_ids = [f"Server_10.0.0.{i + 1}_8098" for i in range(servers)]
    session = f"{client.client_id[0]:x}"
    for index, server in enumerate(server_ids):
        config = instance_config(
            server, f"10.0.0.{index + 1}", 8098, 8097, ["DefaultTenant_REALTIME"]
        )
        pipe.add(client.create_async, paths.participant_config(server), codec.encode(config))
        live = codec.encode(live_instance(server, session))
        pipe.add(client.create_async, paths.liveinstance(server), live, ephemeral=True)
    controller = instance_config(CONTROLLER, "127.0.0.1", 9000, None, ["controller"])
    pipe.add(client.create_async, paths.participant_config(CONTROLLER), codec.encode(controller))
    pipe.add(
        client.create_async,
        paths.liveinstance(CONTROLLER),
        codec.encode(live_instance(CONTROLLER, session)),
        ephemeral=True,
    )
    view = lead_view(24, {CONTROLLER: frozenset(range(24))})
    pipe.add(client.create_async, paths.externalview(LEAD_CONTROLLER_RESOURCE), codec.encode(view))
    # Replica groups: partition p on `replication` consecutive servers, round-robin.
    groups = [
        [server_ids[(start + k) % servers] for k in range(replication)]
        for start in range(0, servers, replication)
    ]
    names = [f"synth{i:04d}" for i in range(tables)]
    config_template = _table_config(names[0]) if names else None
    segment_nodes: list[tuple[str, bytes]] = []
    for raw in names:
        table = f"{raw}_REALTIME"
        ideal, metadata = _table(raw, partitions, segments, groups, now_ms)
        view = ZNRecord(id=table, map_fields={s: dict(r) for s, r in ideal.map_fields.items()})
        config = _table_config(raw) if raw != names[0] else config_template
        pipe.add(client.create_async, paths.table_config(table), codec.encode(config))
        pipe.add(client.create_async, paths.idealstate(table), codec.encode(ideal))
        pipe.add(client.create_async, paths.externalview(table), codec.encode(view))
        pipe.add(client.create_async, paths.segments(table), b"")
        segment_nodes.extend((paths.segment(table, name), data) for name, data in metadata)
    pipe.flush()  # the SEGMENTS/<table> parents exist before their children are created
    for path, data in segment_nodes:
        pipe.add(client.create_async, path, data)
    pipe.flush()
    return SyntheticCluster([f"{n}_REALTIME" for n in names], server_ids, pipe.count)


def _subtree(client: KazooClient, path: str) -> list[str]:
    """Every path under `path` (included), parents before children; one pipelined listing per
    level of the tree."""
    found = [path]
    level = [path]
    while level:
        listings = [(p, client.get_children_async(p)) for p in level]
        level = []
        for parent, result in listings:
            try:
                children = result.get()
            except NoNodeError:
                continue
            prefix = parent.rstrip("/")
            level.extend(f"{prefix}/{child}" for child in children)
        found.extend(level)
    return found


def delete_tree(client: KazooClient, path: str = "/", keep_root: bool = True) -> int:
    """Delete everything under `path` with pipelined deletes, children first; returns the count."""
    nodes = _subtree(client, path)
    doomed: Iterable[str] = reversed(nodes[1:] if keep_root else nodes)
    doomed = [p for p in doomed if p != "/zookeeper" and not p.startswith("/zookeeper/")]
    pipe = Pipeline(client)
    by_depth: dict[int, list[str]] = {}
    for node in doomed:
        by_depth.setdefault(node.count("/"), []).append(node)
    for depth in sorted(by_depth, reverse=True):
        for node in by_depth[depth]:
            pipe.add(client.delete_async, node)
        try:
            pipe.flush()
        except (NoNodeError, NotEmptyError):  # something changed underneath: the slow path
            for child in client.get_children(path):
                client.delete(f"{path.rstrip('/')}/{child}", recursive=True)
            if not keep_root:
                client.delete(path, recursive=True)
            return len(doomed)
    return len(doomed)
