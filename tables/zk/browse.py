"""What a ZooKeeper browser reads beyond the store interface: a znode's full stat in ZooKeeper's
(and Pinot's `/zk/stat`) shape, the stats of a znode's children, and a znode's data unpacked.

Contract:
- `stat_fields(stat)` is the stat as ZooKeeper's `Stat` serialises: `STAT_FIELDS`, all integers
  (milliseconds for `ctime`/`mtime`, 0 for `ephemeralOwner` unless the znode is ephemeral). Both
  stores (`ZooKeeperStore`, `MemoryStore`) carry every field.
- `children_stats(store, path)` maps each child's name to its stat fields, one round trip per
  batch on a real ZooKeeper (pipelined `exists_async`); a child deleted between the listing and
  its stat is left out. `NoNode` when `path` itself is missing.
- `unpack(data)` undoes gzip (Helix's compressed ZNRecords, `tables.zk.codec`) with a bound on the
  unpacked size (`UNPACKED_LIMIT`; `Unpackable` past it or on corrupt gzip), so a hostile znode
  cannot exhaust the memory; other bytes are returned as they are.
"""

from __future__ import annotations

import zlib

from tables.zk import codec
from tables.zk.interface import Stat, ZkStore

__all__ = ["STAT_FIELDS", "UNPACKED_LIMIT", "Unpackable", "children_stats", "stat_fields", "unpack"]

STAT_FIELDS = (
    "czxid",
    "mzxid",
    "ctime",
    "mtime",
    "version",
    "cversion",
    "aversion",
    "ephemeralOwner",
    "dataLength",
    "numChildren",
    "pzxid",
)
UNPACKED_LIMIT = 64 * 1024 * 1024


class Unpackable(ValueError):
    """Compressed data that is corrupt or unpacks past `UNPACKED_LIMIT`."""


def stat_fields(stat: Stat) -> dict[str, int]:
    return {name: int(getattr(stat, name)) for name in STAT_FIELDS}


def children_stats(store: ZkStore, path: str) -> dict[str, dict[str, int]]:
    children = sorted(store.get_children(path))
    base = path.rstrip("/")
    paths = [f"{base}/{child}" for child in children]
    pipelined = getattr(store, "exists_async", None)
    if pipelined is not None:
        pending = [pipelined(p) for p in paths]
        stats = [p.get() for p in pending]
    else:
        stats = [store.exists(p) for p in paths]
    return {child: stat_fields(s) for child, s in zip(children, stats, strict=True) if s}


def unpack(data: bytes, limit: int = UNPACKED_LIMIT) -> bytes:
    if not codec.is_compressed(data):
        return data
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise Unpackable(f"corrupt gzip data: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise Unpackable(f"the data unpacks to more than {limit} bytes")
    if not inflater.eof:
        raise Unpackable("truncated gzip data")
    return out
