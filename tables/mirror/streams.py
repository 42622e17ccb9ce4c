"""The stream's partition count of each mirrored REALTIME table (part of `tables.mirror.sync`).

Contract:
- `read_stream_partitions(tables, redis_url, now_s)` asks each table's stream (its config's first
  stream, `tables.streams.provider_for`) how many partitions it has, and returns
  `{table id: (count or None, error text)}`: the count with "" when it could be read, None with
  why when it could not (no stream config, unknown stream type, topic gone, stream unreachable).
- Tables sharing one stream config cost one read. An answer is reused for `CACHE_SECONDS` within
  a process (the sync runs every few seconds in a long-lived worker), so a cluster of many tables
  costs at most one stream read per topic per `CACHE_SECONDS`, not one per sync.
- `apply_stream_partitions(tables, found)` writes the changed values to the rows (one UPDATE per
  changed table) and returns the rows it changed.
What it is for: a stream partition with no segment yet (the healer's new-partition case) and a
stream that cannot be read are what the ingestion doctor and the partition triage show.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping

from tables.domain.table_config import TableConfig
from tables.models import MirroredTable
from tables.streams import StreamError, provider_for

__all__ = ["CACHE_SECONDS", "apply_stream_partitions", "forget", "read_stream_partitions"]

CACHE_SECONDS = 30.0
ERROR_LENGTH = 255
_cache: dict[tuple[tuple[str, str], ...], tuple[float, int | None, str]] = {}
_lock = threading.Lock()


def _count(stream_config: Mapping[str, str], redis_url: str) -> tuple[int | None, str]:
    try:
        provider = provider_for(stream_config, redis_url)
    except StreamError as exc:
        return None, str(exc)
    try:
        return provider.partition_count(), ""
    except StreamError as exc:
        return None, str(exc)
    finally:
        provider.close()


def read_stream_partitions(
    tables: Iterable[MirroredTable], redis_url: str, now_s: float | None = None
) -> dict[int, tuple[int | None, str]]:
    """See the module docstring. Only REALTIME tables are asked."""
    now_s = time.monotonic() if now_s is None else now_s
    out: dict[int, tuple[int | None, str]] = {}
    for table in tables:
        if table.table_type != "REALTIME":
            continue
        stream_config = TableConfig(rest=dict(table.config or {})).stream_config
        if not stream_config:
            out[table.pk] = (None, "the table config has no stream config")
            continue
        key = tuple(sorted(stream_config.items()))
        with _lock:
            cached = _cache.get(key)
        if cached is None or now_s - cached[0] >= CACHE_SECONDS:
            count, error = _count(stream_config, redis_url)
            cached = (now_s, count, error[:ERROR_LENGTH])
            with _lock:
                _cache[key] = cached
        out[table.pk] = cached[1:]
    return out


def forget() -> None:
    """Drop every cached answer (tests that change a stream between two syncs)."""
    with _lock:
        _cache.clear()


def apply_stream_partitions(
    tables: Iterable[MirroredTable], found: Mapping[int, tuple[int | None, str]]
) -> list[MirroredTable]:
    changed = []
    for table in tables:
        if table.pk not in found:
            continue
        count, error = found[table.pk]
        if table.stream_partitions != count or table.stream_error != error:
            table.stream_partitions, table.stream_error = count, error
            MirroredTable.objects.filter(pk=table.pk).update(
                stream_partitions=count, stream_error=error
            )
            changed.append(table)
    return changed
