"""Pinot's read-only table and segment views that need no server: size, instances, servers of
segments, CRCs, segment status, enabled state. Each is built from ZooKeeper (and, for the size,
the deep store) in Pinot's JSON shape.

Contract:
- Names are checked (400) and a missing table is 404 before anything else is read
  (`ClusterReader`); `{t}` is raw or `<raw>_REALTIME` and means the REALTIME table.
- `server_to_segments`: Pinot's `getServerToSegmentsMap`: from the IdealState, every server with
  the segments it is assigned ONLINE or CONSUMING (OFFLINE assignments are left out), sorted.
- `table_size`: Pinot's `TableSizeDetails`. Pinot asks every server for the on-disk size of each
  segment it hosts; here a server's "report" for a segment is what this cluster really has: the
  size of the segment's tar in the deep store (its `segment.size.in.bytes` when the deep store
  no longer has the file) when the segment is committed (DONE or UPLOADED) and the ExternalView
  shows that server holding it ONLINE. Anything else (a CONSUMING segment, whose rows live only
  in the consumer's memory; a replica not ONLINE in the ExternalView; a disabled table, whose
  replicas are OFFLINE) is -1, as Pinot writes a size a server did not report. The figures then
  follow Pinot's TableSizeReader exactly: per segment `reportedSizeInBytes` (sum of the known
  replicas), `estimatedSizeInBytes` (plus the largest known replica for every unknown one),
  `maxReportedSizePerReplicaInBytes`; a segment no replica knows counts in `missingSegments`
  with -1 sizes; the totals sum the known segments, and are -1 when every segment is missing.
- `segment_crcs`: Pinot's `GET /segments/{t}/crc` map `segment -> segment.crc` (a string; "-1"
  while the segment has no CRC yet, as Pinot's metadata default). Pinot serves it for OFFLINE
  tables only; this controller has REALTIME tables only, so it answers for those.
- `segments_status`: Pinot's `TableViewsUtils.computeDisplayStatus` for every IdealState segment:
  UPDATING when the ExternalView has no entry, BAD when a replica is ERROR, GOOD when the
  ExternalView entry equals the IdealState entry and is all ONLINE/CONSUMING or has an OFFLINE
  replica, UPDATING otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tables.domain.helix_enabled import is_enabled
from tables.domain.names import raw_table_name
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.zk.records import read_record

from .context import ClusterContext
from .errors import NotFound
from .reads import ClusterReader

if TYPE_CHECKING:
    from tables.segments.deepstore import DeepStore

__all__ = [
    "MISSING",
    "segment_crcs",
    "segment_display_status",
    "segments_status",
    "server_to_segments",
    "table_enabled",
    "table_instances",
    "table_schema",
    "table_size",
]

MISSING = -1  # Pinot's DEFAULT_SIZE_WHEN_MISSING_OR_ERROR
SERVING = ("ONLINE", "CONSUMING")


def _views(ctx: ClusterContext, name: str) -> tuple[str, dict, dict]:
    """(table with type, IdealState mapFields, ExternalView mapFields); 404 without a table."""
    reader = ClusterReader(ctx)
    table = reader.table_name(name)
    reader.get_table_config(table)  # 404 without a table config
    ideal = read_record(ctx.client, ctx.paths.idealstate(table))
    external = read_record(ctx.client, ctx.paths.externalview(table))
    return (
        table,
        {} if ideal is None else ideal.record.map_fields,
        {} if external is None else external.record.map_fields,
    )


def table_enabled(ctx: ClusterContext, name: str) -> bool:
    """Whether the table's IdealState is enabled (HELIX_ENABLED); 404 without an IdealState."""
    reader = ClusterReader(ctx)
    table = reader.table_name(name)
    found = read_record(ctx.client, ctx.paths.idealstate(table))
    if found is None:
        raise NotFound(f"Failed to find table: {table}")
    return is_enabled(found.record)


def table_schema(ctx: ClusterContext, name: str) -> dict[str, Any]:
    """The schema of the table (Pinot's `GET /tables/{t}/schema`)."""
    reader = ClusterReader(ctx)
    config = reader.get_table_config(name)
    try:
        return reader.get_schema(config.schema_name).raw
    except NotFound:
        raise NotFound(f"Schema not found for table: {config.table_name_with_type}") from None


def table_instances(ctx: ClusterContext, name: str) -> dict[str, Any]:
    """Pinot's `GET /tables/{t}/instances`: the servers tagged with the table's server tenant
    (`server`), and its brokers (none: this cluster runs no broker)."""
    reader = ClusterReader(ctx)
    config = reader.get_table_config(name)
    servers = reader.tagged_instances(config.server_tag)
    return {
        "tableName": name,
        "brokers": [{"tableType": "realtime", "instances": []}],
        "server": [{"tableType": "realtime", "instances": servers}],
    }


def server_to_segments(ctx: ClusterContext, name: str) -> tuple[str, dict[str, list[str]]]:
    """(table with type, server -> its ONLINE/CONSUMING segments in the IdealState), sorted."""
    table, ideal, _external = _views(ctx, name)
    return table, _assigned(ideal)


def _assigned(ideal: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for segment, states in ideal.items():
        for server, state in states.items():
            if state in SERVING:
                out.setdefault(server, []).append(segment)
    return {server: sorted(out[server]) for server in sorted(out)}


def _segment_metadata(ctx: ClusterContext, table: str, segment: str) -> SegmentZKMetadata | None:
    found = read_record(ctx.client, ctx.paths.segment(table, segment))
    return None if found is None else SegmentZKMetadata.from_znrecord(found.record)


def _committed_size(
    store: DeepStore | None, raw: str, segment: str, meta: SegmentZKMetadata | None
) -> int:
    """The committed segment's tar size, or MISSING when it has no committed copy."""
    if meta is None or not meta.is_completed:
        return MISSING
    if store is not None:
        key = store.segment_key(raw, segment)
        try:
            if store.exists(key):
                return store.size(key)
        except OSError:
            pass  # an unreachable store: fall back to the size recorded at commit
    return meta.size_in_bytes if meta.size_in_bytes is not None else MISSING


def _segment_details(sizes: dict[str, int], segment: str) -> dict[str, Any]:
    known = [s for s in sizes.values() if s != MISSING]
    errors = len(sizes) - len(known)
    largest = max(known, default=MISSING)
    if not known:
        reported = estimated = MISSING
    else:
        reported = sum(known)
        estimated = reported + errors * largest
    return {
        "reportedSizeInBytes": reported,
        "estimatedSizeInBytes": estimated,
        "maxReportedSizePerReplicaInBytes": largest,
        "serverInfo": {
            server: {"segmentName": segment, "diskSizeInBytes": size}
            for server, size in sorted(sizes.items())
        },
    }


def table_size(ctx: ClusterContext, name: str, store: DeepStore | None) -> dict[str, Any]:
    """Pinot's TableSizeDetails of the table; see the module contract for what the sizes are."""
    table, ideal, external = _views(ctx, name)
    raw = raw_table_name(table)
    assigned = _assigned(ideal)
    by_segment: dict[str, dict[str, int]] = {}
    metas: dict[str, SegmentZKMetadata | None] = {}
    for server, segments in assigned.items():
        for segment in segments:
            if segment not in metas:
                metas[segment] = _segment_metadata(ctx, table, segment)
            online = external.get(segment, {}).get(server) == "ONLINE"
            size = _committed_size(store, raw, segment, metas[segment]) if online else MISSING
            by_segment.setdefault(segment, {})[server] = size
    segments = {s: _segment_details(by_segment[s], s) for s in sorted(by_segment)}
    present = [d for d in segments.values() if d["reportedSizeInBytes"] != MISSING]
    missing = len(segments) - len(present)
    sub = {
        "reportedSizeInBytes": sum(d["reportedSizeInBytes"] for d in present),
        "estimatedSizeInBytes": sum(d["estimatedSizeInBytes"] for d in present),
        "missingSegments": missing,
        "reportedSizePerReplicaInBytes": sum(
            d["maxReportedSizePerReplicaInBytes"] for d in present
        ),
        "segments": segments,
    }
    if segments and missing == len(segments):
        for key in ("reportedSizeInBytes", "estimatedSizeInBytes", "reportedSizePerReplicaInBytes"):
            sub[key] = MISSING
    totals = {
        key: (MISSING if segments and missing == len(segments) else max(sub[key], 0))
        for key in ("reportedSizeInBytes", "estimatedSizeInBytes", "reportedSizePerReplicaInBytes")
    }
    return {"tableName": raw, **totals, "offlineSegments": None, "realtimeSegments": sub}


def segment_crcs(ctx: ClusterContext, name: str) -> dict[str, str]:
    """segment -> its `segment.crc` as a string ("-1" when it has none), sorted by segment."""
    reader = ClusterReader(ctx)
    table = reader.table_name(name)
    out = {}
    for segment in reader.segment_names(table):
        meta = _segment_metadata(ctx, table, segment)
        crc = meta.crc if meta is not None and meta.crc is not None else MISSING
        out[segment] = str(crc)
    return out


def segment_display_status(external: dict[str, str] | None, ideal: dict[str, str]) -> str:
    """Pinot's DisplaySegmentStatus (GOOD, BAD, UPDATING) of one segment."""
    if external is None:
        return "UPDATING"
    if "ERROR" in external.values():
        return "BAD"
    if external == ideal:
        all_serving = all(s in SERVING for s in external.values())
        if all_serving or "OFFLINE" in external.values():
            return "GOOD"
    return "UPDATING"


def segments_status(ctx: ClusterContext, name: str) -> list[dict[str, str]]:
    """Pinot's `GET /tables/{t}/segmentsStatus`: [{segmentName, segmentStatus}], IdealState order
    (sorted here)."""
    _table, ideal, external = _views(ctx, name)
    return [
        {
            "segmentName": segment,
            "segmentStatus": segment_display_status(external.get(segment), ideal[segment]),
        }
        for segment in sorted(ideal)
    ]
