"""The demo table of `make demo` (`python manage.py create_demo_table`).

Contract:
- The schema and table config are Pinot's githubEvents example shipped in `tables/demo/` (the
  config already on the Redis stream, replication 2, small flush thresholds); `demo_table_config`
  points it at another topic when asked.
- `wait_for_servers` polls until the cluster is initialised and at least `count` servers carrying
  the table's tenant tag are live (instance config TAG_LIST + LIVEINSTANCES), or raises DemoError
  at the deadline saying what it saw. A ZooKeeper that does not answer yet counts as "not ready".
- `create_demo_table` is idempotent: an existing table is left as it is (nothing else is touched),
  otherwise the topic is created (or grown) to `partitions`, the schema is written and the table
  created with one CONSUMING segment per partition. One exception: an existing table whose Redis
  topic is gone (the demo's Redis keeps no data across restarts while ZooKeeper keeps its state)
  is deleted and created afresh, since its offsets point into a stream that no longer exists.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.exceptions import KazooException, NoNodeError

from tables.domain.table_config import parse_table_config, switch_stream_type
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.cluster import is_initialised

from .context import ClusterContext
from .errors import Conflict, NotFound, Unavailable
from .resources import ResourceManager

__all__ = [
    "DEMO_DIR",
    "DemoError",
    "DemoTable",
    "create_demo_table",
    "demo_schema",
    "demo_table_config",
    "live_tagged_servers",
    "wait_for_servers",
]

DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"
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
    except NoNodeError:
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
        except (Unavailable, KazooException) as exc:
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


def create_demo_table(
    ctx: ClusterContext, admin: RedisTopicAdmin, topic: str, partitions: int
) -> DemoTable:
    """Create the demo table on `topic` unless it exists (see the module's contract)."""
    manager = ResourceManager(ctx)
    config = demo_table_config(topic)
    table = manager.table_name(config["tableName"])
    notes: list[str] = []
    try:
        existing = manager.get_table_config(table)
    except NotFound:
        existing = None
    if existing is not None:
        old_topic = existing.topic_name
        if existing.stream_type != "redis" or not old_topic or admin.topic_exists(old_topic):
            note = f"table {table} already exists (topic {old_topic!r}); left as it is"
            return DemoTable(table, topic, False, (note,))
        # ZooKeeper keeps its state under var/, the demo's Redis keeps none: the table's offsets
        # point into a stream that no longer exists, so the table is of no use. Start afresh.
        manager.delete_table(table)
        notes.append(
            f"table {table} existed but its topic {old_topic!r} is gone (the demo's Redis keeps "
            "no data across restarts): deleted the table to create it afresh"
        )
    notes.append(_ensure_topic(admin, topic, partitions))
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
