"""Reading an offset range of one Redis stream partition inside Spark tasks.

This module imports nothing of the project, and the builder pickles it by value, so executors need
only `redis` installed, not this code base. Layout (see `tables.streams.redis_streams`): the entry
of offset N has the id `0-N` and carries the message bytes in the field `v`.

`chunk_ranges` cuts `[start, end)` into contiguous chunks; `read_chunks` runs in a task, opens its
own client to `redis_url` and reads each chunk with paged XRANGE calls, yielding `(offset, value)`
for every entry that exists. It never invents or repeats an offset; offsets missing from the stream
(trimmed or deleted) are simply absent, and the driver compares counts to detect that.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["VALUE_FIELD", "chunk_ranges", "read_chunks"]

VALUE_FIELD = b"v"
PAGE_SIZE = 1000


def chunk_ranges(start: int, end: int, chunk_size: int) -> list[tuple[int, int]]:
    """`[start, end)` as consecutive `[a, b)` chunks of at most `chunk_size` offsets."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, not {chunk_size}")
    return [(a, min(a + chunk_size, end)) for a in range(start, end, chunk_size)]


def read_chunks(
    chunks: Iterable[tuple[int, int]], redis_url: str, stream_key: str, page_size: int = PAGE_SIZE
) -> Iterator[tuple[int, bytes]]:
    """Every entry with an offset in the given chunks, in offset order within each chunk."""
    import redis  # imported in the task: the module must pickle without a client

    client = redis.Redis.from_url(redis_url, socket_timeout=30, socket_connect_timeout=30)
    try:
        for start, end in chunks:
            low = start
            while low < end:
                entries = client.xrange(
                    stream_key, min=f"0-{low}", max=f"0-{end - 1}", count=page_size
                )
                if not entries:
                    break
                for entry_id, fields in entries:
                    raw = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                    offset = int(raw.partition("-")[2])
                    yield offset, bytes(fields.get(VALUE_FIELD, b""))
                    low = offset + 1
    finally:
        client.close()
