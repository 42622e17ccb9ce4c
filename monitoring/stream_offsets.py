"""Offsets of the partitions no replica reports on, for `/metrics` (`monitoring.partition_metrics`):
paused partitions, and partitions whose consumer published nothing (not started, servers down or
deaf to ZooKeeper). Their replicas' figures are frozen or missing, so the stream is asked.

Contract:
- `quiet_offsets(quiet) -> {(table id, partition): (consumed, upstream)}` for `quiet`, a list of
  `Quiet` (table id, partition, the partition's consuming segment, else its latest one):
  `consumed` is where consumption stands or resumes, from the mirrored segment metadata (a DONE
  segment's end offset, else the segment's start offset), None when unknown; `upstream` is the
  stream's latest offset (`StreamProvider.latest_offset`, the offset the next message will get),
  None when the table has no stream config or the stream cannot be read.
- Cost: two queries (the segments' offsets, the tables' configs), only when `quiet` is not empty,
  whatever its size; one stream read per partition, each answer reused for `CACHE_SECONDS` in
  the process, so frequent scrapes by several Prometheus servers do not multiply stream reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings

from tables.domain.table_config import TableConfig
from tables.models import MirroredSegment, MirroredTable
from tables.streams import StreamError, provider_for

__all__ = ["CACHE_SECONDS", "Quiet", "forget", "quiet_offsets"]

log = logging.getLogger(__name__)

CACHE_SECONDS = 5.0
_cache: dict[tuple[tuple[tuple[str, str], ...], int], tuple[float, int]] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Quiet:
    """A partition no replica reports on: its table id, number and consuming/latest segment."""

    table_id: int
    partition: int
    segment: str


def forget() -> None:
    """Drop every cached stream answer (tests)."""
    with _lock:
        _cache.clear()


def quiet_offsets(quiet: list[Quiet]) -> dict[tuple[int, int], tuple[int | None, int | None]]:
    """See the module docstring."""
    if not quiet:
        return {}
    consumed = _consumed(quiet)
    upstream = _upstream(quiet)
    return {
        (q.table_id, q.partition): (
            consumed.get((q.table_id, q.segment)),
            upstream.get((q.table_id, q.partition)),
        )
        for q in quiet
    }


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _consumed(quiet: list[Quiet]) -> dict[tuple[int, str], int | None]:
    rows = MirroredSegment.objects.filter(
        table_id__in={q.table_id for q in quiet}, name__in={q.segment for q in quiet if q.segment}
    ).values_list("table_id", "name", "end_offset", "start_offset")
    found: dict[tuple[int, str], int | None] = {}
    for table_id, name, end, start in rows:
        end_offset = _int(end)
        found[(table_id, name)] = end_offset if end_offset is not None else _int(start)
    return found


def _upstream(quiet: list[Quiet]) -> dict[tuple[int, int], int]:
    partitions: dict[int, list[int]] = defaultdict(list)
    for q in quiet:
        partitions[q.table_id].append(q.partition)
    configs = MirroredTable.objects.filter(pk__in=partitions).values_list("pk", "config")
    found: dict[tuple[int, int], int] = {}
    now = time.monotonic()
    for table_id, config in configs:
        stream_config = TableConfig(rest=dict(config or {})).stream_config
        if not stream_config:
            continue
        key = tuple(sorted(stream_config.items()))
        for partition, latest in _latest(key, stream_config, partitions[table_id], now).items():
            found[(table_id, partition)] = latest
    return found


def _latest(
    key: tuple[tuple[str, str], ...],
    stream_config: dict[str, str],
    partitions: list[int],
    now: float,
) -> dict[int, int]:
    """The stream's latest offset of each partition (cached answers first)."""
    out: dict[int, int] = {}
    with _lock:
        for partition in partitions:
            cached = _cache.get((key, partition))
            if cached is not None and now - cached[0] < CACHE_SECONDS:
                out[partition] = cached[1]
    missing = [p for p in partitions if p not in out]
    if not missing:
        return out
    try:
        provider = provider_for(stream_config, settings.REDIS_URL)
    except StreamError as exc:
        log.warning("/metrics: cannot read the stream's latest offsets: %s", exc)
        return out
    try:
        for partition in missing:
            out[partition] = provider.latest_offset(partition)
            with _lock:
                _cache[(key, partition)] = (now, out[partition])
    except StreamError as exc:
        log.warning("/metrics: cannot read the stream's latest offsets: %s", exc)
    finally:
        provider.close()
    return out
