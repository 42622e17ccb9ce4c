"""The controller's `GET /debug/tables/{t}` (Pinot's DebugResource): a list with one
`TableDebugInfo` for the REALTIME table.

Contract:
- `{t}` raw or `<raw>_REALTIME`; malformed 400; no table config 404 "Table '<t>' not found".
- Shape (Pinot's `TableDebugInfo`): `tableName` (with type), `ingestionStatus`
  {ingestionState HEALTHY|UNHEALTHY, errorMessage}, `tableSize` {reportedSize, estimatedSize}
  (human-readable, as Pinot's `byteCountToDisplaySize`, of `tables.cluster.table_info`'s size),
  `numSegments` (IdealState), `numServers` (servers tagged with the table's tenant),
  `numBrokers` (0: no brokers here), `segmentDebugInfos`, `serverDebugInfos`, `brokerDebugInfos`.
- `segmentDebugInfos`: [{segmentName, serverState: {server: {idealState, externalView,
  segmentSize, consumerInfo, errorInfo}}}] for the servers the IdealState or the ExternalView
  names for the segment. With `verbosity` 0 (Pinot's default) only the replicas with a problem are
  listed (ERROR in the ExternalView, a consumer NOT_CONSUMING, an error, or no ExternalView state)
  and only segments with such a replica; with verbosity > 0 every replica of every segment.
- Where the figures come from: every server the IdealState assigns is asked, in parallel, each
  within `timeout_s`, for its own `/debug/tables/<t>` (its replicas' current state and the error
  of a failed transition, `tables.server.admin`); what the servers publish in Redis
  (`tables.live_state`) gives `consumerInfo` (Pinot's server-side SegmentConsumerInfo) and the
  `stoppedReason` of a failed consumer. A server that does not answer, or Redis being away, only
  leaves those parts null; the IdealState and ExternalView states are always there.
- `errorInfo` is Pinot's SegmentErrorInfo {timestamp, errorMessage, stackTrace (null)}: the
  transition error the server reports, else the consumer's stoppedReason.
- `serverDebugInfos`: [{serverName, numErrors (replicas of the table ERROR in the ExternalView),
  numMessages (pending Helix messages)}] for servers with either above 0, as Pinot lists them.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tables import live_state
from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.cluster.reads import ClusterReader
from tables.cluster.table_info import table_size
from tables.redisconn import get_redis
from tables.zk.errors import NoNode
from tables.zk.records import read_record

from .consuming import admin_urls

if TYPE_CHECKING:
    from tables.segments.deepstore import DeepStore

__all__ = ["byte_count_to_display_size", "table_debug_info"]

log = logging.getLogger(__name__)

MAX_THREADS = 64
KB, MB, GB = 1024, 1024**2, 1024**3


def byte_count_to_display_size(size: int) -> str:
    """Apache commons-io's `byteCountToDisplaySize`: whole GB, MB, KB or bytes."""
    for unit, name in ((GB, "GB"), (MB, "MB"), (KB, "KB")):
        if size // unit > 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def _get_json(url: str | None, timeout_s: float) -> Any:
    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError, urllib.error.HTTPError) as exc:
        log.info("debug info: %s did not answer usably (%s)", url, exc)
        return None


def _server_reports(
    ctx: ClusterContext, table: str, servers: list[str], timeout_s: float
) -> dict[str, dict[str, dict[str, Any]]]:
    """server -> segment -> the item its /debug/tables/<t> reported (servers that failed: {})."""
    if not servers:
        return {}
    path = f"/debug/tables/{urllib.parse.quote(table)}"
    urls = {s: None if b is None else b + path for s, b in admin_urls(ctx, servers).items()}
    with ThreadPoolExecutor(max_workers=min(len(servers), MAX_THREADS)) as pool:
        fetched = pool.map(lambda s: _get_json(urls[s], timeout_s), servers)
        answers = dict(zip(servers, fetched, strict=True))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for server, answer in answers.items():
        items = answer if isinstance(answer, list) else []
        out[server] = {
            item["segmentName"]: item
            for item in items
            if isinstance(item, dict) and isinstance(item.get("segmentName"), str)
        }
    return out


def _live(ctx: ClusterContext, table: str, servers: list[str]) -> dict[tuple[str, str], Any]:
    """(server, segment) -> PartitionLive of this table; {} when Redis cannot be read."""
    try:
        published = live_state.read_all(get_redis(ctx.redis_url), ctx.paths.cluster, servers)
    except Exception as exc:  # Redis away: the rest of the answer stands
        log.info("debug info of %s: live state unreadable (%s)", table, exc)
        return {}
    return {
        (server, item.segmentName): item
        for server, items in published.items()
        for item in items or []
        if item.table == table
    }


def _consumer_info(item: Any) -> dict[str, Any]:
    partition = str(item.partition)

    def offsets(value: Any) -> dict[str, str]:
        return {} if value is None else {partition: str(value)}

    return {
        "segmentName": item.segmentName,
        "consumerState": item.consumerState,
        "lastConsumedTimestamp": item.lastConsumedMs or 0,
        "partitionToOffsetMap": offsets(item.currentOffset),
        "partitionOffsetInfo": {
            "currentOffsets": offsets(item.currentOffset),
            "latestUpstreamOffsets": offsets(item.upstreamOffset),
            "recordsLag": offsets(item.recordsLag),
            "availabilityLagMs": offsets(item.availabilityLagMs),
        },
    }


def _error_info(report: dict[str, Any] | None, live: Any) -> dict[str, Any] | None:
    message = (report or {}).get("error") or (live.stoppedReason if live is not None else None)
    if not message:
        return None
    since = (report or {}).get("sinceMs") or (live.updatedMs if live is not None else None)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since / 1000)) if since else None
    return {"timestamp": stamp, "errorMessage": message, "stackTrace": None}


def _has_problem(state: dict[str, Any]) -> bool:
    consumer = state["consumerInfo"]
    return (
        state["externalView"] in (None, "ERROR")
        or (consumer is not None and consumer["consumerState"] == "NOT_CONSUMING")
        or state["errorInfo"] is not None
    )


def _count_messages(ctx: ClusterContext, server: str) -> int:
    try:
        return len(ctx.client.get_children(ctx.paths.messages(server)))
    except NoNode:
        return 0


def table_debug_info(
    ctx: ClusterContext,
    name: str,
    verbosity: int,
    timeout_s: float,
    store: DeepStore | None = None,
) -> list[dict[str, Any]]:
    """Pinot's list of TableDebugInfo for the table; see the module contract."""
    reader = ClusterReader(ctx)
    table = reader.table_name(name)
    try:
        config = reader.get_table_config(table)
    except NotFound:
        raise NotFound(f"Table '{name}' not found") from None
    found = read_record(ctx.client, ctx.paths.idealstate(table))
    ideal = {} if found is None else found.record.map_fields
    external_found = read_record(ctx.client, ctx.paths.externalview(table))
    external = {} if external_found is None else external_found.record.map_fields
    servers = sorted({s for states in ideal.values() for s in states})
    reports = _server_reports(ctx, table, servers, timeout_s)
    live = _live(ctx, table, servers)

    segment_infos = []
    for segment in sorted(ideal):
        states: dict[str, Any] = {}
        for server in sorted(set(ideal[segment]) | set(external.get(segment, {}))):
            report = reports.get(server, {}).get(segment)
            item = live.get((server, segment))
            state = {
                "idealState": ideal[segment].get(server),
                "externalView": external.get(segment, {}).get(server),
                "segmentSize": None,
                "consumerInfo": None if item is None else _consumer_info(item),
                "errorInfo": _error_info(report, item),
            }
            if verbosity > 0 or _has_problem(state):
                states[server] = state
        if states:
            segment_infos.append({"segmentName": segment, "serverState": states})

    unhealthy = [
        f"Segment: {info['segmentName']} is not being consumed on server: {server}"
        for info in segment_infos
        for server, state in info["serverState"].items()
        if state["externalView"] == "ERROR"
        or (state["consumerInfo"] or {}).get("consumerState") == "NOT_CONSUMING"
    ]
    size = table_size(ctx, table, store)
    tagged = reader.tagged_instances(config.server_tag)
    server_infos = []
    for server in tagged:
        errors = sum(1 for states in external.values() if states.get(server) == "ERROR")
        messages = _count_messages(ctx, server)
        if errors or messages:
            server_infos.append(
                {"serverName": server, "numErrors": errors, "numMessages": messages}
            )
    return [
        {
            "tableName": table,
            "ingestionStatus": {
                "ingestionState": "UNHEALTHY" if unhealthy else "HEALTHY",
                "errorMessage": "; ".join(unhealthy),
            },
            "tableSize": {
                "reportedSize": byte_count_to_display_size(size["reportedSizeInBytes"]),
                "estimatedSize": byte_count_to_display_size(size["estimatedSizeInBytes"]),
            },
            "numSegments": len(ideal),
            "numServers": len(tagged),
            "numBrokers": 0,
            "segmentDebugInfos": segment_infos,
            "serverDebugInfos": server_infos,
            "brokerDebugInfos": [],
        }
    ]
