"""The demo table of `make demo` (`python manage.py create_demo_table`).

Contract:
- The schema and table config are Pinot's githubEvents example shipped in `tables/demo/` (the
  config already on the Redis stream, replication 2, small flush thresholds); `demo_table_config`
  points it at another topic when asked.
- `wait_for_servers` polls until the cluster is initialised and at least `count` servers carrying
  the table's tenant tag are live (instance config TAG_LIST + LIVEINSTANCES), or raises DemoError
  at the deadline saying what it saw. A ZooKeeper that does not answer yet counts as "not ready".
- `create_demo_table` is idempotent and never deletes anything: an existing table is left as it
  is; otherwise the topic is created (or grown) to `partitions`, the schema is written and the
  table created with one CONSUMING segment per partition.
- An existing table whose Redis topic is gone (Redis lost its data: its append-only file was
  removed; a restart with the file loses nothing) keeps its segments. Its topic is recreated empty
  with the table's partitions, each partition's stream continuing at the highest offset anyone
  knows of (`resume_offsets`): the segments' offsets in ZooKeeper, and the consuming and upstream
  offsets the live servers publish to Redis (they republish within LIVE_PUBLISH_SECONDS of a Redis
  restart). Offsets are never reused, so producers write after that point, no consumer skips a new
  row, and keys stay unique. This is data loss and is reported as such: an ERROR log line and a
  "DATA LOSS:" note per partition; the offsets known to be lost (between what the servers had read
  and where the stream continues) are added to the table's durable counter `llcStreamDataLoss`,
  and the servers count them again as they skip them. Rows produced after the last offset anyone
  saw are lost too; nobody can count those.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
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
    "demo_schema",
    "demo_table_config",
    "live_tagged_servers",
    "recreate_topic",
    "resume_offsets",
    "wait_for_servers",
]

log = logging.getLogger(__name__)

DEMO_DIR = Path(__file__).resolve().parent
SCHEMA_FILE = DEMO_DIR / "githubEvents_schema.json"
TABLE_CONFIG_FILE = DEMO_DIR / "githubEvents_realtime_table_config.json"
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


def demo_table_config(topic: str = DEFAULT_TOPIC) -> dict[str, Any]:
    """The demo table config (REST form) reading `topic`."""
    config = json.loads(TABLE_CONFIG_FILE.read_text(encoding="utf-8"))
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


def resume_offsets(
    ctx: ClusterContext, client: redis.Redis, table: str
) -> tuple[dict[int, int], dict[int, int]]:
    """(where each partition's stream must continue, how far the servers had read it).

    The first is the highest offset known anywhere: the segments' start and end offsets in
    ZooKeeper, and what the live servers publish (the offset they consume next and the stream's
    latest offset as they last saw it). The second leaves out the latest offsets: the offsets
    between the two are known to have existed and to be lost.
    """
    manager = ResourceManager(ctx)
    read: dict[int, int] = {}
    for found in segment_ranges(manager, table)[0]:
        for value in (found.start_offset, found.end_offset):
            offset = parse_offset(value)
            if offset is not None:
                read[found.partition] = max(read.get(found.partition, FIRST_OFFSET), offset)
    latest = dict(read)
    try:
        servers = sorted(set(ctx.client.get_children(ctx.paths.liveinstances)))
    except NoNode:
        servers = []
    published = live_state.read_all(client, ctx.paths.cluster, servers) if servers else {}
    for items in published.values():
        for item in items or ():
            if item.table != table:
                continue
            p = item.partition
            if item.currentOffset is not None:
                read[p] = max(read.get(p, FIRST_OFFSET), item.currentOffset)
            for offset in (item.currentOffset, item.upstreamOffset):
                if offset is not None:
                    latest[p] = max(latest.get(p, FIRST_OFFSET), offset)
    for p, offset in read.items():
        latest[p] = max(latest.get(p, FIRST_OFFSET), offset)
    return latest, read


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
    """The table exists but its topic is gone: recreate the topic, report the loss."""
    topic = existing.topic_name or ""
    latest, read = resume_offsets(ctx, client, table)
    if not recreate_topic(client, topic, latest, partitions, key_prefix):
        note = f"table {table} already exists (topic {topic!r} exists again); left as it is"
        return DemoTable(table, topic, False, (note,))
    lost = {p: latest[p] - read.get(p, latest[p]) for p in latest}
    total = sum(lost.values())
    losses = tuple(
        f"DATA LOSS: table {table} partition {p}: topic {topic!r} was gone; the rows it held "
        f"from offset {read.get(p, latest[p])} on that were not committed are lost "
        f"({lost[p]} known, any produced after offset {latest[p] - 1} unknown); the stream "
        f"continues at offset {latest[p]}"
        for p in sorted(latest)
    )
    for line in losses:
        log.error("%s", line)
    if total:
        _count_data_loss(table, total)
    count = max([partitions, *(p + 1 for p in latest)])
    starts = " ".join(f"p{p}={latest.get(p, FIRST_OFFSET)}" for p in range(count))
    note = (
        f"table {table} already exists but its topic {topic!r} was gone: recreated it empty with "
        f"{count} partitions, continuing at offsets {starts}; the table and its committed "
        f"segments are left as they are ({total} offsets known lost, counted in "
        "llcStreamDataLoss)"
    )
    return DemoTable(table, topic, False, (note,), losses, total)


def create_demo_table(
    ctx: ClusterContext,
    client: redis.Redis,
    topic: str,
    partitions: int,
    key_prefix: str = DEFAULT_KEY_PREFIX,
) -> DemoTable:
    """Create the demo table on `topic` unless it exists (see the module's contract)."""
    admin = RedisTopicAdmin(client, key_prefix)
    manager = ResourceManager(ctx)
    config = demo_table_config(topic)
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
    notes.append(
        f"table {table} created: replication {created.replication}, {len(segments)} CONSUMING "
        f"segments on topic {topic!r}"
    )
    return DemoTable(table, topic, True, tuple(notes))
