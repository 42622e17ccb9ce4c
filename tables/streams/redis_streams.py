"""The embedded default stream (`streamType: redis`): one Redis stream per partition.

Layout, under a key prefix (default "pinot:stream:"; tests pass their own):

- `<prefix><topic>:meta`: a hash whose `partitions` field is the partition count;
- `<prefix><topic>:<partition>`: a Redis stream per partition (absent until its first message).

Offsets. Every entry's id is `0-<offset>`: the stream's sequence number IS the offset. Redis never
accepts the id 0-0, so **the first offset of a partition is 1** (`FIRST_OFFSET`). Producers append
with `XADD <key> 0-* ...` inside one Lua script per batch, so Redis assigns the next sequence number
atomically: concurrent producers never reuse an offset, and one batch gets contiguous offsets. The
latest offset is `last-generated-id + 1` from `XINFO STREAM`, which survives trimming; a partition
never written has earliest == latest == 1. Needs Redis >= 7.0 (`0-*` ids).

Entries carry two fields: `v` (the message bytes) and `t` (producer time, epoch ms).

Retention. `trim_before` is exact (`XTRIM MINID` without `~`); the approximate form only drops
whole radix-tree nodes of about 100 entries and may remove nothing at all.

Data-loss detection. Redis reads from a trimmed id do not fail: `XRANGE`/`XREAD` silently start at
the first surviving entry. So `fetch` reads the first entry and the requested range in one
MULTI/EXEC snapshot and compares offsets itself: the batch reports `data_loss` when the requested
start is below the first available offset (or the first message returned is past the start). When
a partition was trimmed to nothing, the first available offset is the latest offset.

Reading. `fetch` returns a columnar batch (`MessageBatch.of_columns`) built from redis-py's raw
XRANGE/XREAD replies (the provider reads through a second client on the caller's pool with the
stream commands' reply parsing switched off): no dict and no `StreamMessage` per entry. Entry ids
are strictly increasing, so when the first and last ids of a reply are `0-f` and `0-l` and it
holds `l - f + 1` entries, its offsets are exactly `range(f, l + 1)`; otherwise every id is parsed.
A message's timestamp is parsed only when read. A provider runs one such read at a time (a lock
around the MULTI/EXEC round trip, not around the blocking wait below): the consumers of one
server share their table's provider, and on a small machine several threads pulling multi-megabyte
replies at once cost more CPU than the same reads one after another (GIL hand-offs, Redis
interleaving the replies; `bench/ingest.py`, 400k rows: ~0.4 s more Python and ~0.3 s more Redis
CPU without the lock).

Blocking. When nothing is available at or after the start, `fetch` waits with `XREAD BLOCK`. The
wait is cut into slices shorter than the client's socket timeout (redis-py does not extend it for
blocking commands and would raise TimeoutError), until `timeout_ms` has passed, or until
`wake(partition)`: each blocking XREAD goes out with a `CLIENT ID` of its connection, and `wake`
sends `CLIENT UNBLOCK` for the ones of that partition (a force-committed or stopped consumer does
not wait out its fetch; a wake that comes before the XREAD is out is caught when it returns). A
user whose ACL refuses `CLIENT` still reads; its fetches end at their timeout, as before.

Fetching from an offset beyond the latest offset waits until that offset is produced. Fetching a
partition number the topic does not have raises ValueError.

Outages. A Redis that cannot be reached, times out or is still loading its append-only file raises
`StreamUnavailable` (retry with back-off) from every method here; a missing topic raises
`TopicNotFound` (permanent). Writes are idempotent when given a `batch_id`: a retry of a batch whose
reply was lost (Redis stalled after applying it) returns the offsets of the first write instead of
appending the rows again. The marker lives `DEDUPE_TTL_S` beside the partition's stream.

Offset ranges (re-ingestion, see `tables.streams.base`). `RedisRangeSource` holds the Redis URL and
the partition's stream key; `read(start, end)` opens its own client, reads `[start, end)` with
paged XRANGE calls (`RANGE_PAGE_SIZE` entries each) and closes the client. The stream is dense:
every offset below the latest holds a message until it is trimmed, so the caller counts what came
back to find offsets trimmed (or deleted) before or while it read.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

import redis

from tables.redisconn import get_redis
from tables.streams.base import (
    LazyColumn,
    LossCallback,
    MessageBatch,
    RangeSource,
    StreamError,
    StreamProvider,
    StreamUnavailable,
    TopicAdmin,
    TopicExists,
    TopicNotFound,
    check_fetch_arguments,
    register_range_source,
    register_stream_type,
)

__all__ = [
    "DEFAULT_KEY_PREFIX",
    "FIRST_OFFSET",
    "RANGE_PAGE_SIZE",
    "STREAM_TYPE",
    "RedisRangeSource",
    "RedisStreamProvider",
    "RedisTopicAdmin",
    "provider_from_config",
    "range_source_from_config",
]

STREAM_TYPE = "redis"
DEFAULT_KEY_PREFIX = "pinot:stream:"
FIRST_OFFSET = 1
VALUE_FIELD = b"v"
TIME_FIELD = b"t"
DEDUPE_TTL_S = 3600
RANGE_PAGE_SIZE = 1000  # entries per XRANGE of a range read

# KEYS: meta, stream[, dedupe marker]. ARGV: partition, now_ms, marker ttl, value...
# Returns the first id written (or, for a batch already written, the first id it got then).
_PRODUCE_LUA = """
if KEYS[3] then
  local seen = redis.call('GET', KEYS[3])
  if seen then return seen end
end
local count = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
if not count then return redis.error_reply('NOTOPIC') end
local partition = tonumber(ARGV[1])
if partition >= count then return redis.error_reply('NOPARTITION ' .. count) end
local first = false
for i = 4, #ARGV do
  local id = redis.call('XADD', KEYS[2], '0-*', 'v', ARGV[i], 't', ARGV[2])
  if not first then first = id end
end
if KEYS[3] and first then redis.call('SET', KEYS[3], first, 'EX', tonumber(ARGV[3])) end
return first
"""

_RawEntry = tuple[bytes, list[bytes]]  # (id, [field, value, ...]) as Redis sends it
_RAW_REPLIES = ("XRANGE", "XREAD")  # commands the provider's reading client does not parse

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _reachable(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Redis connection trouble (refused, reset, timed out, loading) -> StreamUnavailable."""

    @functools.wraps(method)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StreamUnavailable(f"Redis is not reachable: {exc}") from exc

    return call


# KEYS: meta. ARGV: new count. Returns the old count.
_ADD_PARTITIONS_LUA = """
local count = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
if not count then return redis.error_reply('NOTOPIC') end
if tonumber(ARGV[1]) <= count then return redis.error_reply('NOTINCREASE ' .. count) end
redis.call('HSET', KEYS[1], 'partitions', ARGV[1])
return count
"""


class _Keys:
    def __init__(self, prefix: str, topic: str) -> None:
        self.meta = f"{prefix}{topic}:meta"
        self._stream = f"{prefix}{topic}:"

    def partition(self, partition: int) -> str:
        return f"{self._stream}{partition}"

    def dedupe(self, batch_id: str, partition: int) -> str:
        return f"{self._stream}dedupe:{batch_id}:{partition}"


def _offset(entry_id: bytes | str) -> int:
    raw = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = raw.partition("-")
    if ms != "0":
        raise StreamError(f"entry id {raw} was not written by this plugin (expected 0-<offset>)")
    return int(seq)


def _unparsed(response: object, **options: object) -> object:
    return response


def _entry_id(offset: int) -> str:
    return f"0-{offset}"


def _field(fields: list[bytes], name: bytes, default: bytes) -> bytes:
    """The value of `name` in a raw entry's [field, value, field, value...] list."""
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == name:
            return fields[i + 1]
    return default


def _timestamp(entry: _RawEntry) -> int:
    return int(_field(entry[1], TIME_FIELD, b"0"))


def _batch(entries: list[_RawEntry], start: int, earliest: int) -> MessageBatch:
    """The columnar batch of raw entries read for `start`, the stream's first entry then being
    `earliest` (see the module's Reading and Data-loss notes)."""
    read_from = max(start, earliest)
    if not entries:
        return MessageBatch.of_columns([], [], [], read_from, earliest, start < earliest)
    first, last = _offset(entries[0][0]), _offset(entries[-1][0])
    offsets: Sequence[int]
    if last - first + 1 == len(entries):
        offsets = range(first, last + 1)  # exact: ids only increase, and none is missing
    else:
        offsets = [_offset(entry_id) for entry_id, _ in entries]
    # The produce script writes `v` first: one comparison per entry, a scan otherwise.
    values = [f[1] if f[0] == VALUE_FIELD else _field(f, VALUE_FIELD, b"") for _, f in entries]
    if first > read_from:
        # Offsets [read_from, first) vanished: trimmed while we waited (or XDEL'd by hand).
        earliest = first
    return MessageBatch.of_columns(
        offsets, values, LazyColumn(entries, _timestamp), last + 1, earliest, start < earliest
    )


def _count(raw: bytes | str | None, topic: str) -> int:
    if raw is None:
        raise TopicNotFound(f"topic {topic!r} does not exist")
    return int(raw)


def _check_partition(topic: str, partition: int, count: int) -> None:
    if not 0 <= partition < count:
        raise ValueError(f"topic {topic!r} has no partition {partition} ({count} partitions)")


def _script_error(exc: redis.ResponseError, topic: str, partition: int | None = None) -> Exception:
    if isinstance(exc, redis.exceptions.NoScriptError):
        # A Redis restarted under the pipeline has not loaded the script yet: the next try loads
        # it (the batch id keeps the retry from writing twice).
        return StreamUnavailable(f"Redis restarted (the produce script is not loaded): {exc}")
    message = str(exc)
    if message.startswith("NOTOPIC"):
        return TopicNotFound(f"topic {topic!r} does not exist")
    if message.startswith("NOPARTITION"):
        count = message.split()[-1]
        return ValueError(f"topic {topic!r} has no partition {partition} ({count} partitions)")
    return StreamError(f"redis refused the write to {topic!r}: {message}")


class RedisStreamProvider(StreamProvider):
    """Reads one topic of the embedded stream through a (shared, thread-safe) redis-py client.

    `close()` releases nothing: the client and its pool belong to the caller.
    """

    def __init__(
        self, client: redis.Redis, topic: str, key_prefix: str = DEFAULT_KEY_PREFIX
    ) -> None:
        super().__init__(topic)
        self._client = client
        # Same pool, but XRANGE/XREAD replies come back raw (no dict per entry).
        self._reader = redis.Redis(connection_pool=client.connection_pool)
        for command in _RAW_REPLIES:
            self._reader.set_response_callback(command, _unparsed)
        # One non-blocking read in flight per provider (see the module's Reading note).
        self._read_lock = threading.Lock()
        self._keys = _Keys(key_prefix, topic)
        socket_timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        # Each XREAD BLOCK must return before the socket read times out.
        self._max_block_ms = None if socket_timeout is None else max(10, int(socket_timeout * 500))
        # `wake`: the Redis client ids blocked in an XREAD, per partition, and a count of wakes.
        self._wake_lock = threading.Lock()
        self._blocked: dict[int, set[int]] = {}
        self._wakes: dict[int, int] = {}

    @_reachable
    def partition_count(self) -> int:
        return _count(self._client.hget(self._keys.meta, "partitions"), self.topic)

    @_reachable
    def earliest_offset(self, partition: int) -> int:
        return self._checked_bounds(partition)[0]

    @_reachable
    def latest_offset(self, partition: int) -> int:
        return self._checked_bounds(partition)[1]

    def _checked_bounds(self, partition: int) -> tuple[int, int]:
        """The partition's (earliest, latest) after checking it exists: one round trip (the
        controller's caller check reads the latest offset inside every commit's first call)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(self._keys.meta, "partitions")
        pipe.xinfo_stream(self._keys.partition(partition))
        raw_count, info = pipe.execute(raise_on_error=False)
        if isinstance(raw_count, Exception):
            raise raw_count
        _check_partition(self.topic, partition, _count(raw_count, self.topic))
        return self._bounds_of(info)

    @_reachable
    def fetch(
        self, partition: int, start_offset: int, max_messages: int, timeout_ms: int
    ) -> MessageBatch:
        check_fetch_arguments(start_offset, max_messages)
        woken = self._wakes.get(partition, 0)  # a wake from now on ends this fetch's wait
        start = max(start_offset, FIRST_OFFSET)  # offsets below 1 never existed: nothing lost
        key = self._keys.partition(partition)
        pipe = self._reader.pipeline(transaction=True)
        pipe.hget(self._keys.meta, "partitions")
        pipe.xrange(key, min="-", max="+", count=1)
        pipe.xrange(key, min=_entry_id(start), max="+", count=max_messages)
        with self._read_lock:
            raw_count, first, entries = pipe.execute()
        _check_partition(self.topic, partition, _count(raw_count, self.topic))

        # An empty partition may still have had messages, all trimmed: XINFO knows where it ends
        # (and, should a producer have written since the snapshot, where it now starts).
        earliest = _offset(first[0][0]) if first else self._bounds(key)[0]
        read_from = max(start, earliest)
        if not entries and timeout_ms > 0:
            entries = self._wait_for(key, partition, read_from, max_messages, timeout_ms, woken)
        return _batch(entries, start, earliest)

    def wake(self, partition: int) -> None:
        """`CLIENT UNBLOCK` for every XREAD of `partition` blocked now (module docstring)."""
        self.wake_many([partition])

    def wake_many(self, partitions: Iterable[int]) -> None:
        """`wake` for every partition of `partitions`, the unblocks in one pipeline: a server told
        to force-commit ~40 segments woke their fetches one round trip at a time, and under the
        GIL contention of the pause each round trip waited for its turn (the last consumers of a
        64-partition pause stopped 0.2-0.5 s after the first)."""
        with self._wake_lock:
            blocked = []
            for partition in partitions:
                self._wakes[partition] = self._wakes.get(partition, 0) + 1
                blocked += self._blocked.get(partition, ())
        if not blocked:
            return
        pipe = self._client.pipeline(transaction=False)
        for client_id in blocked:
            pipe.client_unblock(client_id)
        with contextlib.suppress(redis.RedisError):
            pipe.execute(raise_on_error=False)

    def _wait_for(
        self,
        key: str,
        partition: int,
        offset: int,
        max_messages: int,
        timeout_ms: int,
        woken: int,
    ) -> list[_RawEntry]:
        """Block until entries at or after `offset` exist, `timeout_ms` passes or the partition
        is woken (`woken`: its wake count when the fetch began)."""
        deadline = time.monotonic() + timeout_ms / 1000
        after = _entry_id(offset - 1)  # XREAD returns ids strictly greater; "0-0" is fine here
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0 or self._wakes.get(partition, 0) != woken:
                return []
            block_ms = remaining_ms
            if self._max_block_ms is not None:
                block_ms = min(block_ms, self._max_block_ms)
            # BLOCK 0 would wait forever: never pass it.
            reply = self._blocking_xread(partition, key, after, max_messages, max(1, block_ms))
            if reply:  # RESP2: [[key, entries]]; RESP3: {key: entries}
                return next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]

    def _blocking_xread(
        self, partition: int, key: str, after: str, count: int, block_ms: int
    ) -> Any:
        """One XREAD BLOCK on a connection of the pool whose client id `wake` can unblock."""
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            # Sent together: the id (the connection's own, even after a reconnect) comes back at
            # once, while the XREAD blocks.
            xread = ("XREAD", "COUNT", count, "BLOCK", block_ms, "STREAMS", key, after)
            conn.send_packed_command(conn.pack_commands([("CLIENT", "ID"), xread]))
            try:
                client_id = int(conn.read_response())
            except redis.ResponseError:  # CLIENT refused (an ACL): this read ends at its timeout
                return conn.read_response()
            with self._wake_lock:
                self._blocked.setdefault(partition, set()).add(client_id)
            try:
                return conn.read_response()
            finally:
                with self._wake_lock:
                    self._blocked[partition].discard(client_id)
        except BaseException:
            conn.disconnect()  # a reply may still be on its way: never reuse the connection
            raise
        finally:
            pool.release(conn)

    def _bounds(self, key: str) -> tuple[int, int]:
        """(earliest, latest) of one partition's stream, from one XINFO STREAM."""
        try:
            info = self._client.xinfo_stream(key)
        except redis.ResponseError as exc:
            info = exc
        return self._bounds_of(info)

    @staticmethod
    def _bounds_of(info: Any) -> tuple[int, int]:
        """(earliest, latest) from an XINFO STREAM reply, or from its error: a stream never
        written (no such key) starts and ends at the first offset."""
        if isinstance(info, redis.ResponseError):
            if "no such key" in str(info).lower():
                return FIRST_OFFSET, FIRST_OFFSET
            raise info
        if isinstance(info, Exception):
            raise info
        latest = _offset(info["last-generated-id"]) + 1
        first = info.get("first-entry")
        return (_offset(first[0]) if first else latest), latest


class RedisTopicAdmin(TopicAdmin):
    """Creates, writes and trims topics of the embedded stream."""

    def __init__(self, client: redis.Redis, key_prefix: str = DEFAULT_KEY_PREFIX) -> None:
        self._client = client
        self._prefix = key_prefix
        self._produce = client.register_script(_PRODUCE_LUA)
        self._add_partitions = client.register_script(_ADD_PARTITIONS_LUA)

    def provider(self, topic: str) -> RedisStreamProvider:
        """A reader of `topic` over the same client and key prefix."""
        return RedisStreamProvider(self._client, topic, self._prefix)

    @_reachable
    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise ValueError(f"a topic needs at least one partition, not {partitions}")
        if not self._client.hsetnx(_Keys(self._prefix, topic).meta, "partitions", partitions):
            raise TopicExists(f"topic {topic!r} already exists")

    @_reachable
    def add_partitions(self, topic: str, new_count: int) -> None:
        try:
            self._add_partitions(keys=[_Keys(self._prefix, topic).meta], args=[new_count])
        except redis.ResponseError as exc:
            if str(exc).startswith("NOTINCREASE"):
                current = str(exc).split()[-1]
                raise ValueError(
                    f"topic {topic!r} has {current} partitions; the count can only increase "
                    f"(asked for {new_count})"
                ) from None
            raise _script_error(exc, topic) from None

    @_reachable
    def partition_count(self, topic: str) -> int:
        return _count(self._client.hget(_Keys(self._prefix, topic).meta, "partitions"), topic)

    @_reachable
    def topic_exists(self, topic: str) -> bool:
        return bool(self._client.exists(_Keys(self._prefix, topic).meta))

    def produce(self, topic: str, partition: int, values: list[bytes], now_ms: int) -> list[int]:
        return self.produce_many(topic, {partition: values}, now_ms).get(partition, [])

    @_reachable
    def produce_many(
        self,
        topic: str,
        batches: Mapping[int, list[bytes]],
        now_ms: int,
        batch_id: str | None = None,
    ) -> dict[int, list[int]]:
        """One pipelined round trip; each partition's batch is atomic and contiguous. With a
        `batch_id`, sending the same batch again returns the offsets it got the first time."""
        keys = _Keys(self._prefix, topic)
        order = [(p, values) for p, values in batches.items() if values]
        pipe = self._client.pipeline(transaction=False)
        for partition, values in order:
            if partition < 0:
                raise ValueError(f"partition {partition} is negative")
            script_keys = [keys.meta, keys.partition(partition)]
            if batch_id is not None:
                script_keys.append(keys.dedupe(batch_id, partition))
            self._produce(
                keys=script_keys, args=[partition, now_ms, DEDUPE_TTL_S, *values], client=pipe
            )
        replies = pipe.execute(raise_on_error=False)
        offsets: dict[int, list[int]] = {p: [] for p in batches}
        for (partition, values), reply in zip(order, replies, strict=True):
            if isinstance(reply, redis.ResponseError):
                raise _script_error(reply, topic, partition)
            first = _offset(reply)
            offsets[partition] = list(range(first, first + len(values)))
        return offsets

    @_reachable
    def trim_before(self, topic: str, partition: int, offset: int) -> int:
        if offset <= FIRST_OFFSET:
            return 0
        key = _Keys(self._prefix, topic).partition(partition)
        return int(self._client.xtrim(key, minid=_entry_id(offset), approximate=False))

    @_reachable
    def delete_topic(self, topic: str) -> bool:
        keys = _Keys(self._prefix, topic)
        raw = self._client.hget(keys.meta, "partitions")
        if raw is None:
            return False
        self._client.delete(keys.meta, *(keys.partition(p) for p in range(int(raw))))
        return True


class RedisRangeSource(RangeSource):
    """One partition's stream re-read by offset range (see the module's Offset ranges note)."""

    dense = True

    def __init__(self, redis_url: str, stream_key: str, page_size: int = RANGE_PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, not {page_size}")
        self.redis_url = redis_url
        self.stream_key = stream_key
        self.page_size = page_size

    def __repr__(self) -> str:
        return f"RedisRangeSource({self.stream_key!r})"

    def read(
        self, start: int, end: int, lost: LossCallback | None = None
    ) -> Iterator[tuple[int, bytes]]:
        client = redis.Redis.from_url(self.redis_url, socket_timeout=30, socket_connect_timeout=30)
        try:
            low, last = start, _entry_id(end - 1)
            while low < end:
                entries = client.xrange(
                    self.stream_key, min=_entry_id(low), max=last, count=self.page_size
                )
                if not entries:
                    break
                for entry_id, fields in entries:
                    offset = _offset(entry_id)
                    yield offset, bytes(fields.get(VALUE_FIELD, b""))
                    low = offset + 1
        finally:
            client.close()


def _url_and_prefix(stream_config: Mapping[str, str], default_redis_url: str) -> tuple[str, str]:
    url = stream_config.get("stream.redis.url") or default_redis_url
    return url, stream_config.get("stream.redis.key.prefix") or DEFAULT_KEY_PREFIX


def provider_from_config(
    topic: str, stream_config: Mapping[str, str], default_redis_url: str
) -> RedisStreamProvider:
    """The registered factory: `stream.redis.url` (else the default) and `stream.redis.key.prefix`.

    `stream.redis.key.prefix` is this project's own key (default "pinot:stream:").
    """
    url, prefix = _url_and_prefix(stream_config, default_redis_url)
    return RedisStreamProvider(get_redis(url), topic, prefix)


def range_source_from_config(
    topic: str, stream_config: Mapping[str, str], default_redis_url: str, partition: int
) -> RedisRangeSource:
    """The registered range-source factory (the same keys as `provider_from_config`)."""
    url, prefix = _url_and_prefix(stream_config, default_redis_url)
    return RedisRangeSource(url, _Keys(prefix, topic).partition(partition))


register_stream_type(STREAM_TYPE, provider_from_config)
register_range_source(STREAM_TYPE, range_source_from_config)
