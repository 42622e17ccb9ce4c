"""The demo tables of `make demo` (`python manage.py create_demo_table`).

Contract:
- The schema and the first table config are Pinot's githubEvents example shipped in `tables/demo/`
  (the config already on the Redis stream, replication 2, small flush thresholds). The second
  table, `githubEventsPauseless`, is the same table with pauseless consumption
  (`pauselessConsumptionEnabled`, `peerSegmentDownloadScheme` http as Pinot requires at
  replication 2) and the same schema (`segmentsConfig.schemaName`). Both read the one demo topic,
  as two Pinot tables may read one Kafka topic, so they ingest the same rows side by side;
  `demo_table_config` points a config at another topic when asked.
- `wait_for_servers` polls until the cluster is initialised and at least `count` servers carrying
  the table's tenant tag are live (instance config TAG_LIST + LIVEINSTANCES), or raises DemoError
  at the deadline saying what it saw. A ZooKeeper that does not answer yet counts as "not ready".
- `create_demo_tables` creates each of them with `create_demo_table`, which is idempotent and
  never deletes anything: an existing table is left as it is; otherwise the topic is created (or
  grown) to `partitions`, the schema is written and the table created with one CONSUMING segment
  per partition (a table added to a demo that already ran reads the topic from its earliest
  offset).
- An existing table whose Redis topic is gone (Redis lost its data: its append-only file was
  removed; a restart with the file loses nothing) keeps its segments, and so does every other
  table reading that topic (`tables_on_topic`). The topic is recreated empty with the table's
  partitions, each partition's stream continuing at the highest offset anyone knows of, over all
  those tables (`resume_offsets`): the segments' offsets in ZooKeeper, and the consuming and
  upstream offsets the live servers publish to Redis (they republish within LIVE_PUBLISH_SECONDS
  of a Redis restart). Offsets are never reused, so producers write after that point, no consumer
  of any of the tables skips a new row, and keys stay unique. This is data loss and is reported as
  such, for each table reading the topic: an ERROR log line and a "DATA LOSS:" note per partition;
  the offsets known to be lost (between what that table's servers had read and where the stream
  continues) are added to the table's durable counter `llcStreamDataLoss`, and the servers count
  them again as they skip them. Rows produced after the last offset anyone saw are lost too;
  nobody can count those.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from tables import live_state
from tables.cluster.context import ClusterContext
from tables.cluster.errors import Conflict, NotFound, Unavailable
from tables.controller.resources import ResourceManager
from tables.domain.ledger import parse_offset
from tables.domain.table_config import TableConfig, parse_table_config, switch_stream_type
from tables.ledger import segment_ranges
from tables.streams.redis_streams import DEFAULT_KEY_PREFIX, FIRST_OFFSET, RedisTopicAdmin
from tables.zk.cluster import is_initialised
from tables.zk.errors import NoNode, ZooKeeperError

__all__ = [
    "DEMO_DIR",
    "DemoError",
    "DemoTable",
    "create_demo_table",
    "create_demo_tables",
    "demo_schema",
    "demo_table_config",
    "live_tagged_servers",
    "recreate_topic",
    "resume_offsets",
    "tables_on_topic",
    "wait_for_servers",
]

log = logging.getLogger(__name__)

DEMO_DIR = Path(__file__).resolve().parent
SCHEMA_FILE = DEMO_DIR / "githubEvents_schema.json"
TABLE_CONFIG_FILE = DEMO_DIR / "githubEvents_realtime_table_config.json"
PAUSELESS_CONFIG_FILE = DEMO_DIR / "githubEventsPauseless_realtime_table_config.json"
# The demo's tables, created in this order, all on the one demo topic.
TABLE_CONFIG_FILES = (TABLE_CONFIG_FILE, PAUSELESS_CONFIG_FILE)
DEFAULT_TOPIC = "githubEvents"


class DemoError(Exception):
    """The demo table cannot be set up; the message says why."""


@dataclass(frozen=True)
class DemoTable:
    table: str
    topic: str
    created: bool  # False: the table already existed and was left alone
    notes: tuple[str, ...]  # what was done, one line each
    data_loss: tuple[str, ...] = ()  # one line per partition whose rows were lost with the topic
    lost_offsets: int = 0  # offsets known to be lost (counted in llcStreamDataLoss)


def demo_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def demo_table_config(
    topic: str = DEFAULT_TOPIC, config_file: Path = TABLE_CONFIG_FILE
) -> dict[str, Any]:
    """A demo table config (REST form; the first demo table's by default) reading `topic`."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    return switch_stream_type(config, "redis", topic)


def demo_server_tag() -> str:
    return parse_table_config(demo_table_config()).server_tag


def live_tagged_servers(ctx: ClusterContext, tag: str) -> list[str]:
    """Instances whose config carries `tag` and that have a live instance, sorted."""
    try:
        live = set(ctx.client.get_children(ctx.paths.liveinstances))
    except NoNode:
        return []
    return [i for i in ResourceManager(ctx).tagged_instances(tag) if i in live]


def wait_for_servers(
    context: Callable[[], ClusterContext],
    count: int,
    timeout_s: float,
    progress: Callable[[str], None],
    interval_s: float = 0.5,
) -> list[str]:
    """Poll until the cluster is initialised with `count` live tagged servers; returns them."""
    tag = demo_server_tag()
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        try:
            ctx = context()
            if not is_initialised(ctx.client, ctx.paths):
                seen, servers = f"cluster {ctx.paths.cluster} not initialised yet", []
            else:
                servers = live_tagged_servers(ctx, tag)
                seen = f"{len(servers)} of {count} servers tagged {tag} live"
                if servers:
                    seen += f" ({', '.join(servers)})"
        except (Unavailable, ZooKeeperError) as exc:
            seen, servers = f"ZooKeeper not answering: {exc}", []
        if len(servers) >= count:
            progress(seen)
            return servers
        if seen != last:
            progress(f"waiting: {seen}")
            last = seen
        if time.monotonic() >= deadline:
            raise DemoError(
                f"gave up after {timeout_s:g} s: {seen}; start servers with "
                "`python manage.py run_server --instance Server_<host>_<port>`"
            )
        time.sleep(interval_s)


def _ensure_topic(admin: RedisTopicAdmin, topic: str, partitions: int) -> str:
    before = admin.ensure_topic(topic, partitions)
    if before == 0:
        return f"created topic {topic!r} with {partitions} partitions"
    if before < partitions:
        return f"topic {topic!r}: partitions {before} -> {partitions}"
    return f"topic {topic!r} exists with {before} partitions"


# KEYS: meta, one stream per partition. ARGV: partitions, then each partition's next offset.
# Positions every partition's stream before the meta key appears: a producer (refused while the
# topic has no meta) never writes at an offset below where the stream continues.
_RECREATE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 2, #KEYS do
  local last = tonumber(ARGV[i]) - 1
  if last >= 1 then
    local id = '0-' .. last
    if redis.call('EXISTS', KEYS[i]) == 0 then
      redis.call('XADD', KEYS[i], id, 'v', '', 't', '0')
      redis.call('XDEL', KEYS[i], id)
    else
      redis.pcall('XSETID', KEYS[i], id)
    end
  end
end
redis.call('HSET', KEYS[1], 'partitions', ARGV[1])
return 1
"""


def recreate_topic(
    client: redis.Redis,
    topic: str,
    next_offsets: Mapping[int, int],
    partitions: int,
    key_prefix: str = DEFAULT_KEY_PREFIX,
) -> bool:
    """Create `topic` empty, each partition's stream continuing at `next_offsets[p]` (its first
    offset, and the earliest and latest offset readers see); False when the topic exists.

    Uses the stream layout of `tables.streams.redis_streams`: `<prefix><topic>:meta` and
    `<prefix><topic>:<partition>`, entry ids `0-<offset>`.
    """
    count = max([partitions, *(p + 1 for p in next_offsets)])
    keys = [f"{key_prefix}{topic}:meta"] + [f"{key_prefix}{topic}:{p}" for p in range(count)]
    starts = [max(next_offsets.get(p, FIRST_OFFSET), FIRST_OFFSET) for p in range(count)]
    return bool(client.eval(_RECREATE_LUA, len(keys), *keys, count, *starts))


def tables_on_topic(ctx: ClusterContext, topic: str) -> list[str]:
    """The REALTIME tables (with type) that read `topic` of the embedded Redis stream, sorted."""
    manager = ResourceManager(ctx)
    found = []
    for table in manager.list_tables():
        try:
            config = manager.get_table_config(table)
        except NotFound:  # deleted meanwhile
            continue
        if config.stream_type == "redis" and config.topic_name == topic:
            found.append(table)
    return found


def resume_offsets(
    ctx: ClusterContext, client: redis.Redis, tables: Sequence[str]
) -> tuple[dict[int, int], dict[str, dict[int, int]]]:
    """(where each partition's stream must continue, how far each table's servers had read it).

    The first is the highest offset known anywhere, over every table of `tables` (the tables
    reading one topic): the segments' start and end offsets in ZooKeeper, and what the live
    servers publish (the offset they consume next and the stream's latest offset as they last saw
    it). The second leaves out the latest offsets: for each table, the offsets between the two are
    known to have existed and to be lost.
    """
    manager = ResourceManager(ctx)
    read: dict[str, dict[int, int]] = {table: {} for table in tables}
    for table in tables:
        for found in segment_ranges(manager, table)[0]:
            for value in (found.start_offset, found.end_offset):
                offset = parse_offset(value)
                if offset is not None:
                    _raise(read[table], found.partition, offset)
    latest: dict[int, int] = {}
    for offsets in read.values():
        for p, offset in offsets.items():
            _raise(latest, p, offset)
    try:
        servers = sorted(set(ctx.client.get_children(ctx.paths.liveinstances)))
    except NoNode:
        servers = []
    published = live_state.read_all(client, ctx.paths.cluster, servers) if servers else {}
    for items in published.values():
        for item in items or ():
            if item.table not in read:
                continue
            if item.currentOffset is not None:
                _raise(read[item.table], item.partition, item.currentOffset)
            for offset in (item.currentOffset, item.upstreamOffset):
                if offset is not None:
                    _raise(latest, item.partition, offset)
    return latest, read


def _raise(offsets: dict[int, int], partition: int, offset: int) -> None:
    offsets[partition] = max(offsets.get(partition, FIRST_OFFSET), offset)


def _count_data_loss(table: str, lost: int) -> None:
    from tables.models import DurableCounter  # the app registry is ready when this runs

    DurableCounter.increment("llcStreamDataLoss", table, by=lost)


def _restore_lost_topic(
    ctx: ClusterContext,
    client: redis.Redis,
    existing: TableConfig,
    table: str,
    partitions: int,
    key_prefix: str,
) -> DemoTable:
    """`table` exists but its topic is gone: recreate the topic past every offset known to any
    table reading it, and report each such table's loss."""
    topic = existing.topic_name or ""
    readers = sorted({table, *tables_on_topic(ctx, topic)})
    latest, read = resume_offsets(ctx, client, readers)
    if not recreate_topic(client, topic, latest, partitions, key_prefix):
        note = f"table {table} already exists (topic {topic!r} exists again); left as it is"
        return DemoTable(table, topic, False, (note,))
    losses: list[str] = []
    lost: dict[str, int] = {}
    for reader in readers:
        lines, lost[reader] = _losses(reader, topic, latest, read[reader])
        losses.extend(lines)
        if lost[reader]:
            _count_data_loss(reader, lost[reader])
    for line in losses:
        log.error("%s", line)
    count = max([partitions, *(p + 1 for p in latest)])
    starts = " ".join(f"p{p}={latest.get(p, FIRST_OFFSET)}" for p in range(count))
    known = ", ".join(f"{lost[r]} offsets known lost in {r}" for r in readers)
    note = (
        f"table {table} already exists but its topic {topic!r} was gone: recreated it empty with "
        f"{count} partitions, continuing at offsets {starts}; the tables reading it "
        f"({', '.join(readers)}) and their committed segments are left as they are ({known}, "
        "counted in llcStreamDataLoss)"
    )
    return DemoTable(table, topic, False, (note,), tuple(losses), sum(lost.values()))


def _losses(
    table: str, topic: str, latest: Mapping[int, int], read: Mapping[int, int]
) -> tuple[list[str], int]:
    """One DATA LOSS line per partition of `table`, and the offsets it is known to have lost."""
    lost = {p: latest[p] - read.get(p, latest[p]) for p in latest}
    lines = [
        f"DATA LOSS: table {table} partition {p}: topic {topic!r} was gone; the rows it held "
        f"from offset {read.get(p, latest[p])} on that were not committed are lost "
        f"({lost[p]} known, any produced after offset {latest[p] - 1} unknown); the stream "
        f"continues at offset {latest[p]}"
        for p in sorted(latest)
    ]
    return lines, sum(lost.values())


def create_demo_tables(
    ctx: ClusterContext,
    client: redis.Redis,
    topic: str,
    partitions: int,
    key_prefix: str = DEFAULT_KEY_PREFIX,
) -> tuple[DemoTable, ...]:
    """Create each demo table (`TABLE_CONFIG_FILES`, in order) on `topic` unless it exists."""
    return tuple(
        create_demo_table(ctx, client, topic, partitions, key_prefix, config_file)
        for config_file in TABLE_CONFIG_FILES
    )


def create_demo_table(
    ctx: ClusterContext,
    client: redis.Redis,
    topic: str,
    partitions: int,
    key_prefix: str = DEFAULT_KEY_PREFIX,
    config_file: Path = TABLE_CONFIG_FILE,
) -> DemoTable:
    """Create the demo table of `config_file` on `topic` unless it exists (the module's
    contract)."""
    admin = RedisTopicAdmin(client, key_prefix)
    manager = ResourceManager(ctx)
    config = demo_table_config(topic, config_file)
    table = manager.table_name(config["tableName"])
    try:
        existing = manager.get_table_config(table)
    except NotFound:
        existing = None
    if existing is not None:
        old_topic = existing.topic_name
        if existing.stream_type != "redis" or not old_topic or admin.topic_exists(old_topic):
            note = f"table {table} already exists (topic {old_topic!r}); left as it is"
            return DemoTable(table, topic, False, (note,))
        return _restore_lost_topic(ctx, client, existing, table, partitions, key_prefix)
    notes = [_ensure_topic(admin, topic, partitions)]
    schema = manager.add_schema(demo_schema())
    notes.append(f"schema {schema.name} written")
    try:
        created = manager.add_table(config)
    except Conflict:  # created meanwhile by someone else
        return DemoTable(table, topic, False, (*notes, f"table {table} already exists"))
    segments = manager.segment_names(table)
    mode = ", pauseless" if created.pauseless_enabled else ""
    notes.append(
        f"table {table} created: replication {created.replication}{mode}, {len(segments)} "
        f"CONSUMING segments on topic {topic!r}"
    )
    return DemoTable(table, topic, True, tuple(notes))
