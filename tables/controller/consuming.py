"""The controller's `GET /tables/{t}/consumingSegmentsInfo` (reference §4.6), done Pinot's way.

Contract:
- `{t}` is the raw name or `<raw>_REALTIME`; a malformed name is 400; a table without an IdealState
  is 404 "Table <raw>_REALTIME not found!".
- The servers asked are those the IdealState names CONSUMING for at least one segment of the table.
  Each one's admin endpoint is `http://<HELIX_HOST>:<adminPort>` (HELIX_PORT when the instance
  config has no adminPort), and all are asked in parallel for
  `/tables/<t>_REALTIME/consumingSegmentsInfo`, each within `timeout_s` (the whole fan-out waits
  at most about `timeout_s` too).
- Server failures never fail the call; they are counted as Pinot's reader counts them:
  `serversFailingToRespond` for a server that cannot be asked (no instance config or host), does
  not answer in time, refuses the connection or answers a status other than 200 (a 404 from a
  server that does not host the table included); `serversUnparsableRespond` for a 200 whose body
  is not a JSON list of consumer items. Such a server contributes no item.
- `_segmentToConsumingInfoMap` (sorted by segment): every segment some server reports, plus every
  segment CONSUMING in the IdealState, with `[]` when no server reported it (so a segment whose
  only servers failed shows `[]`). Items (sorted by server) are Pinot's controller-side
  `ConsumingSegmentInfo`: `serverName`, `consumerState`, `lastConsumedTimestamp`,
  `partitionToOffsetMap`, `partitionOffsetInfo{currentOffsetsMap, latestUpstreamOffsetMap,
  recordsLagMap, availabilityLagMsMap}`, each figure exactly as the server reported it.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.domain.names import raw_table_name
from tables.zk.records import read_record

from .resources import ResourceManager

__all__ = ["ServerAnswer", "consuming_segments_info", "server_admin_url"]

log = logging.getLogger(__name__)

MAX_FAN_OUT_THREADS = 64  # one thread per server up to this many
# Slack on top of the per-server timeout before the fan-out stops waiting for stragglers.
FAN_OUT_SLACK_S = 1.0
CONSUMING = "CONSUMING"
_OFFSET_KEYS = (
    ("currentOffsetsMap", "currentOffsets"),
    ("latestUpstreamOffsetMap", "latestUpstreamOffsets"),
    ("recordsLagMap", "recordsLag"),
    ("availabilityLagMsMap", "availabilityLagMs"),
)


@dataclass
class ServerAnswer:
    """One server's part of the fan-out: its items, or why there are none."""

    server: str
    items: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (segment, item)
    failed: bool = False
    unparsable: bool = False
    reason: str = ""


def server_admin_url(ctx: ClusterContext, instance: str) -> str | None:
    """`http://<HELIX_HOST>:<adminPort or HELIX_PORT>` of a participant, None when unknown."""
    found = read_record(ctx.client, ctx.paths.participant_config(instance))
    if found is None:
        return None
    simple = found.record.simple_fields
    host = simple.get("HELIX_HOST")
    port = simple.get("adminPort") or simple.get("HELIX_PORT")
    return f"http://{host}:{port}" if host and port else None


def admin_urls(ctx: ClusterContext, servers: list[str]) -> dict[str, str | None]:
    """server -> its admin base URL (`server_admin_url`), None when unknown or unreadable."""
    urls: dict[str, str | None] = {}
    for server in servers:
        try:
            urls[server] = server_admin_url(ctx, server)
        except ValueError:  # an unreadable instance config
            urls[server] = None
    return urls


def _segment_name(item: Any) -> str:
    if not isinstance(item, dict) or not isinstance(item.get("segmentName"), str):
        raise ValueError("an item without segmentName")
    return item["segmentName"]


def _controller_item(server: str, item: dict[str, Any]) -> dict[str, Any]:
    """A server-side SegmentConsumerInfo as the controller's ConsumingSegmentInfo; ValueError
    when it does not have that shape."""
    offsets = item.get("partitionOffsetInfo") or {}
    if not isinstance(offsets, dict):
        raise ValueError("partitionOffsetInfo is not an object")
    return {
        "serverName": server,
        "consumerState": item.get("consumerState"),
        "lastConsumedTimestamp": item.get("lastConsumedTimestamp"),
        "partitionToOffsetMap": item.get("partitionToOffsetMap") or {},
        "partitionOffsetInfo": {ours: offsets.get(theirs) or {} for ours, theirs in _OFFSET_KEYS},
    }


def _ask(server: str, base: str | None, table: str, timeout_s: float) -> ServerAnswer:
    if base is None:
        return ServerAnswer(server, failed=True, reason="no admin endpoint in its instance config")
    url = f"{base}/tables/{urllib.parse.quote(table)}/consumingSegmentsInfo"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        return ServerAnswer(server, failed=True, reason=f"HTTP {exc.code}")
    except (OSError, ValueError) as exc:  # refused, timed out, reset, bad URL
        return ServerAnswer(server, failed=True, reason=f"{type(exc).__name__}: {exc}")
    try:
        data = json.loads(body)
        if not isinstance(data, list):
            raise ValueError("not a JSON list")
        items = [(_segment_name(item), _controller_item(server, item)) for item in data]
    except (ValueError, TypeError) as exc:
        return ServerAnswer(server, unparsable=True, reason=str(exc))
    return ServerAnswer(server, items=items)


def _fan_out(
    ctx: ClusterContext, table: str, servers: list[str], timeout_s: float
) -> list[ServerAnswer]:
    if not servers:
        return []
    urls = admin_urls(ctx, servers)
    pool = ThreadPoolExecutor(
        max_workers=min(len(servers), MAX_FAN_OUT_THREADS), thread_name_prefix="consuming-info"
    )
    try:
        futures = {s: pool.submit(_ask, s, urls[s], table, timeout_s) for s in servers}
        wait_futures(futures.values(), timeout=timeout_s + FAN_OUT_SLACK_S)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    answers = []
    for server, future in futures.items():
        if future.done() and not future.cancelled() and future.exception() is None:
            answers.append(future.result())
        else:
            answers.append(ServerAnswer(server, failed=True, reason="no answer in time"))
    return answers


def consuming_segments_info(ctx: ClusterContext, table: str, timeout_s: float) -> dict[str, Any]:
    """Pinot's ConsumingSegmentsInfoMap of `table`; see the module contract."""
    table = ResourceManager(ctx).table_name(table)
    found = read_record(ctx.client, ctx.paths.idealstate(table))
    if found is None:
        raise NotFound(f"Table {table} not found!")
    consuming_segments = set()
    servers: set[str] = set()
    for segment, states in found.record.map_fields.items():
        hosts = [server for server, state in states.items() if state == CONSUMING]
        if hosts:
            consuming_segments.add(segment)
            servers.update(hosts)

    by_segment: dict[str, list[dict[str, Any]]] = {s: [] for s in consuming_segments}
    failing = unparsable = 0
    for answer in _fan_out(ctx, table, sorted(servers), timeout_s):
        if answer.failed or answer.unparsable:
            failing += answer.failed
            unparsable += answer.unparsable
            log.info(
                "consumingSegmentsInfo of %s: %s did not answer usably (%s)",
                raw_table_name(table),
                answer.server,
                answer.reason,
            )
            continue
        for segment, item in answer.items:
            by_segment.setdefault(segment, []).append(item)
    return {
        "serversFailingToRespond": failing,
        "serversUnparsableRespond": unparsable,
        "_segmentToConsumingInfoMap": {
            segment: sorted(items, key=lambda i: i["serverName"])
            for segment, items in sorted(by_segment.items())
        },
    }
