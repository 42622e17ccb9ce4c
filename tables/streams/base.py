"""The one stream interface: partitioned topics of messages addressed by integer offsets.

Offsets. Every message of a partition has an `int` offset; offsets are totally ordered within a
partition and assigned in produce order. Each plugin documents its first offset (the embedded
Redis plugin starts at 1). Two offsets describe a partition at any instant:

- the *latest offset* is the offset the next produced message will get (Kafka's log-end offset);
- the *earliest offset* is the first offset still available; it equals the latest offset when the
  partition holds nothing (new, or everything was trimmed by retention).

A consumer that stores "the next offset to read" (a segment's start or end offset) can always
resume from it: `fetch` returns messages with offsets `>= start_offset` in order, and
`MessageBatch.next_offset` is where the following fetch starts.

Data loss. When retention removed messages a consumer has not read yet, a fetch from the old offset
cannot return them. `fetch` never hides that: `MessageBatch.data_loss` is true when the requested
start offset is below the earliest still-available offset (or messages inside the requested range
are missing), and `first_available_offset` says where the stream resumed. The number of lost
offsets is `first_available_offset - start_offset`. Consumers count and report each loss.

Plugins register a factory under their `streamType` and are built from a table's stream config map
(Pinot's keys: `streamType`, `stream.<type>.topic.name`, `stream.<type>.<prop>`) by `provider_for`.
`TopicAdmin` is the write side of a stream the project runs itself (the embedded one): creating
topics, producing and retention trimming, for the produce command and tests.

Offset ranges. Re-ingestion reads a closed range `[start, end)` of one partition again, inside
Spark tasks. `range_source_for(stream_config, partition, default_redis_url)` returns the plugin's
`RangeSource` for that partition (plugins register one factory per `streamType` with
`register_range_source`): a small picklable value (plain settings, no client) whose
`read(start, end, lost)` runs where it is used, opens its own client, reads in pages and closes
the client, yielding `(offset, value bytes)` in offset order for every message of the range the
stream still holds. `dense` says how to recognise loss: in a dense stream (the embedded Redis one)
every offset below the latest holds a message unless it was trimmed, so fewer messages than
offsets means loss; in a sparse one (Kafka) transaction markers and compaction leave offsets
without a message, and only a read below the low watermark loses data: `read` reports each such
range through `lost(first_missing, first_available)` and moves on.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar, overload

__all__ = [
    "LARGEST",
    "SMALLEST",
    "LazyColumn",
    "LossCallback",
    "MessageBatch",
    "ProviderFactory",
    "RangeSource",
    "RangeSourceFactory",
    "StreamError",
    "StreamMessage",
    "StreamProvider",
    "StreamUnavailable",
    "TopicAdmin",
    "TopicExists",
    "TopicNotFound",
    "UnknownStreamType",
    "check_fetch_arguments",
    "fetch_timeout_ms",
    "offset_reset_criteria",
    "provider_for",
    "range_source_for",
    "register_range_source",
    "register_stream_type",
    "stream_property",
    "stream_types",
]

SMALLEST = "smallest"
LARGEST = "largest"
_Item = TypeVar("_Item")
DEFAULT_OFFSET_RESET = LARGEST  # Pinot's default when auto.offset.reset is absent
DEFAULT_FETCH_TIMEOUT_MS = 5000


class LazyColumn(Sequence[int]):
    """A batch column computed from the plugin's raw items only when read (a consumer reads one
    timestamp of a batch, not all of them): `convert(item)` per item asked for."""

    __slots__ = ("_convert", "_items")

    def __init__(self, items: Sequence[_Item], convert: Callable[[_Item], int]) -> None:
        self._items = items
        self._convert = convert

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self._convert(item) for item in self._items[index]]
        return self._convert(self._items[index])


class StreamError(Exception):
    """A stream could not be reached, configured or used."""


class StreamUnavailable(StreamError):
    """The stream cannot be reached right now (a stall, a restart, a time-out): retry with back-off.

    Everything else a plugin raises is permanent until someone acts: a deleted topic
    (`TopicNotFound`), a partition the topic does not have, bad credentials, a config error.
    """


class UnknownStreamType(StreamError):
    """No plugin is registered for the `streamType` of a stream config."""


class TopicNotFound(StreamError):
    """The topic does not exist (or was deleted)."""


class TopicExists(StreamError):
    """`create_topic` found the topic already there."""


@dataclass(frozen=True)
class StreamMessage:
    offset: int
    value: bytes
    timestamp_ms: int  # producer time, epoch milliseconds


class MessageBatch:
    """What one fetch returned.

    `messages` are in offset order, all `>= start_offset`. `next_offset` is where the next fetch
    starts (one past the last message, or where the stream resumed when nothing came back).
    `first_available_offset` is the earliest offset the stream still held when it was read.
    `data_loss` is true when offsets at or after the requested start were no longer available.

    Two equivalent views of the same rows: `messages` (one `StreamMessage` each) and the columns
    `offsets`, `values` and `timestamps` (same order, same length, `len(batch)`). A plugin builds
    either (`MessageBatch(messages, ...)` or `MessageBatch.of_columns(...)`); the other view is
    derived on first use, so a reader of the columns (the server's consumer) pays no per-message
    object and a plugin may pass lazy sequences (a `range` of contiguous offsets, timestamps
    parsed only when read). Read-only: never change a batch or its sequences.
    """

    __slots__ = (
        "_messages",
        "_offsets",
        "_timestamps",
        "_values",
        "data_loss",
        "first_available_offset",
        "next_offset",
    )

    def __init__(
        self,
        messages: list[StreamMessage],
        next_offset: int,
        first_available_offset: int,
        data_loss: bool,
    ) -> None:
        self._messages: list[StreamMessage] | None = messages
        self._offsets: Sequence[int] | None = None
        self._values: Sequence[bytes] | None = None
        self._timestamps: Sequence[int] | None = None
        self.next_offset = next_offset
        self.first_available_offset = first_available_offset
        self.data_loss = data_loss

    @classmethod
    def of_columns(
        cls,
        offsets: Sequence[int],
        values: Sequence[bytes],
        timestamps: Sequence[int],
        next_offset: int,
        first_available_offset: int,
        data_loss: bool,
    ) -> MessageBatch:
        """A batch from three equally long columns (ValueError otherwise)."""
        if not len(offsets) == len(values) == len(timestamps):
            raise ValueError(
                f"columns differ in length: {len(offsets)} offsets, {len(values)} values, "
                f"{len(timestamps)} timestamps"
            )
        batch = cls([], next_offset, first_available_offset, data_loss)
        batch._messages = None
        batch._offsets, batch._values, batch._timestamps = offsets, values, timestamps
        return batch

    @property
    def messages(self) -> list[StreamMessage]:
        if self._messages is None:
            self._messages = [
                StreamMessage(offset, value, timestamp_ms)
                for offset, value, timestamp_ms in zip(
                    self.offsets, self.values, self.timestamps, strict=True
                )
            ]
        return self._messages

    @property
    def offsets(self) -> Sequence[int]:
        if self._offsets is None:
            self._offsets = [m.offset for m in self.messages]
        return self._offsets

    @property
    def values(self) -> Sequence[bytes]:
        if self._values is None:
            self._values = [m.value for m in self.messages]
        return self._values

    @property
    def timestamps(self) -> Sequence[int]:
        """Producer times (epoch ms), one per message."""
        if self._timestamps is None:
            self._timestamps = [m.timestamp_ms for m in self.messages]
        return self._timestamps

    def __len__(self) -> int:
        return len(self._messages) if self._messages is not None else len(self.offsets)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageBatch):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # holds lists, as the dataclass it replaced did

    def _key(self) -> tuple[list[StreamMessage], int, int, bool]:
        return self.messages, self.next_offset, self.first_available_offset, self.data_loss

    def __repr__(self) -> str:
        return (
            f"MessageBatch({len(self)} messages, next_offset={self.next_offset}, "
            f"first_available_offset={self.first_available_offset}, "
            f"data_loss={self.data_loss})"
        )


class StreamProvider(ABC):
    """Read access to one topic. Safe to share between threads unless a plugin says otherwise."""

    def __init__(self, topic: str) -> None:
        self.topic = topic

    @abstractmethod
    def partition_count(self) -> int:
        """The topic's current partition count; raises TopicNotFound."""

    @abstractmethod
    def earliest_offset(self, partition: int) -> int:
        """The first offset still available (== latest_offset when the partition is empty)."""

    @abstractmethod
    def latest_offset(self, partition: int) -> int:
        """The offset the next produced message will get."""

    def offset_for_criteria(self, partition: int, criteria: str) -> int:
        """Pinot's `auto.offset.reset`: "smallest" -> earliest, "largest" -> latest."""
        value = criteria.strip().lower()
        if value == SMALLEST:
            return self.earliest_offset(partition)
        if value == LARGEST:
            return self.latest_offset(partition)
        raise ValueError(
            f"offset criteria {criteria!r} is not supported (use {SMALLEST!r} or {LARGEST!r})"
        )

    @abstractmethod
    def fetch(
        self, partition: int, start_offset: int, max_messages: int, timeout_ms: int
    ) -> MessageBatch:
        """Up to `max_messages` messages from `start_offset` on.

        Blocks up to `timeout_ms` when nothing at or after the start is available yet, and returns
        an empty batch after the timeout (`timeout_ms <= 0`: never blocks).
        """

    def wake(self, partition: int) -> None:  # noqa: B027 - optional hook
        """End, now, the fetches of `partition` that are blocked waiting for messages: they
        return what they have (nothing). A consumer told to commit or stop calls it, so that it
        does not wait out its fetch's timeout. Optional: the default does nothing, and such a
        fetch returns at its timeout."""

    def wake_many(self, partitions: Iterable[int]) -> None:
        """`wake` for each of `partitions` (a force commit of many segments); a provider may do
        it in one round trip."""
        for partition in partitions:
            self.wake(partition)

    def close(self) -> None:  # noqa: B027 - optional hook; providers without resources keep it
        """Release what the provider holds. The default holds nothing."""

    def __enter__(self) -> StreamProvider:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


LossCallback = Callable[[int, int], None]
"""`lost(first_missing, first_available)`: offsets `[first_missing, first_available)` are gone
(`first_available` is where the stream resumes, which may lie beyond the range read)."""


class RangeSource(ABC):
    """The messages of one partition in offset ranges, read where they are used (see the module
    docstring). Instances are picklable and hold no client; `read` may run in any process that
    can reach the stream."""

    #: True: every offset below the latest holds a message unless it was trimmed (a count
    #: shortfall is loss). False: offsets may hold no message (transaction markers, compaction);
    #: `read` reports losses through its `lost` callback.
    dense: bool = True

    @abstractmethod
    def read(
        self, start: int, end: int, lost: LossCallback | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """Every message the stream still holds with an offset in `[start, end)`, in offset order,
        each once. Offsets the stream no longer holds are skipped (a sparse source calls `lost`
        for them); it never waits for offsets not produced yet (the caller checks the range
        against the latest offset first)."""


class TopicAdmin(ABC):
    """The write side of a stream this project runs itself."""

    @abstractmethod
    def create_topic(self, topic: str, partitions: int) -> None:
        """Create `topic` with `partitions` empty partitions; raises TopicExists."""

    @abstractmethod
    def add_partitions(self, topic: str, new_count: int) -> None:
        """Raise the partition count to `new_count`; ValueError unless it increases."""

    @abstractmethod
    def partition_count(self, topic: str) -> int:
        """The topic's partition count; raises TopicNotFound."""

    @abstractmethod
    def topic_exists(self, topic: str) -> bool: ...

    def ensure_topic(self, topic: str, partitions: int) -> int:
        """Create `topic` with `partitions`, or grow it to that many; never shrinks it. Returns
        the partition count it had before (0: created now)."""
        try:
            self.create_topic(topic, partitions)
            return 0
        except TopicExists:
            pass
        current = self.partition_count(topic)
        if partitions > current:
            self.add_partitions(topic, partitions)
        return current

    @abstractmethod
    def produce(self, topic: str, partition: int, values: list[bytes], now_ms: int) -> list[int]:
        """Append `values` in order with producer time `now_ms`; returns their offsets."""

    def produce_many(
        self,
        topic: str,
        batches: Mapping[int, list[bytes]],
        now_ms: int,
        batch_id: str | None = None,
    ) -> dict[int, list[int]]:
        """`produce` for several partitions at once (plugins may do it in one round trip).

        `batch_id` asks for an idempotent write: a plugin that supports it returns the first
        write's offsets when the same batch is sent again (this default does not)."""
        return {p: self.produce(topic, p, values, now_ms) for p, values in batches.items()}

    @abstractmethod
    def trim_before(self, topic: str, partition: int, offset: int) -> int:
        """Exactly remove every message with an offset below `offset`; returns how many."""

    @abstractmethod
    def delete_topic(self, topic: str) -> bool:
        """Remove the topic and its messages; returns whether it existed."""


# --- stream config and the plugin registry ---------------------------------------------------

ProviderFactory = Callable[[str, Mapping[str, str], str], StreamProvider]
"""`factory(topic, stream_config, default_redis_url)` -> a provider for that topic."""

RangeSourceFactory = Callable[[str, Mapping[str, str], str, int], RangeSource]
"""`factory(topic, stream_config, default_redis_url, partition)` -> that partition's source."""

_registry: dict[str, ProviderFactory] = {}
_range_registry: dict[str, RangeSourceFactory] = {}
_registry_lock = threading.Lock()


def register_stream_type(name: str, factory: ProviderFactory) -> None:
    """Make `streamType: <name>` build providers with `factory` (a later call replaces it)."""
    with _registry_lock:
        _registry[name] = factory


def register_range_source(name: str, factory: RangeSourceFactory) -> None:
    """Make `streamType: <name>` re-read offset ranges with `factory` (a later call replaces it)."""
    with _registry_lock:
        _range_registry[name] = factory


def stream_types() -> list[str]:
    with _registry_lock:
        return sorted(_registry)


def check_fetch_arguments(start_offset: int, max_messages: int) -> None:
    """ValueError for what no plugin's `fetch` accepts: a negative start, fewer than 1 message."""
    if start_offset < 0:
        raise ValueError(f"start offset {start_offset} is negative")
    if max_messages < 1:
        raise ValueError(f"max_messages must be at least 1, not {max_messages}")


def stream_property(stream_config: Mapping[str, str], prop: str) -> str | None:
    """The value of `stream.<streamType>.<prop>`, or None."""
    stream_type = stream_config.get("streamType", "")
    return stream_config.get(f"stream.{stream_type}.{prop}")


def offset_reset_criteria(stream_config: Mapping[str, str]) -> str:
    """`stream.<type>.consumer.prop.auto.offset.reset`, "largest" when absent (as in Pinot)."""
    value = stream_property(stream_config, "consumer.prop.auto.offset.reset")
    return value.strip().lower() if value else DEFAULT_OFFSET_RESET


def fetch_timeout_ms(stream_config: Mapping[str, str]) -> int:
    """`stream.<type>.fetch.timeout.millis`, 5000 when absent (as in Pinot)."""
    value = stream_property(stream_config, "fetch.timeout.millis")
    if value is None or not value.strip():
        return DEFAULT_FETCH_TIMEOUT_MS
    try:
        return int(value)
    except ValueError:
        raise StreamError(f"fetch.timeout.millis={value!r} is not an integer") from None


def provider_for(stream_config: Mapping[str, str], default_redis_url: str) -> StreamProvider:
    """A provider for the topic of a Pinot stream config map.

    Reads `streamType` and `stream.<type>.topic.name`; raises UnknownStreamType when no plugin is
    registered for the type, StreamError when a key is missing.
    """
    topic, factory = _lookup(stream_config, _registry)
    return factory(topic, stream_config, default_redis_url)


def range_source_for(
    stream_config: Mapping[str, str], partition: int, default_redis_url: str
) -> RangeSource:
    """The `RangeSource` of one partition of a Pinot stream config map's topic (the same keys and
    errors as `provider_for`; UnknownStreamType also when the plugin cannot re-read ranges)."""
    topic, factory = _lookup(stream_config, _range_registry)
    return factory(topic, stream_config, default_redis_url, partition)


_F = TypeVar("_F")


def _lookup(stream_config: Mapping[str, str], registry: Mapping[str, _F]) -> tuple[str, _F]:
    """(topic, the factory registered for the streamType) of a stream config map."""
    stream_type = (stream_config.get("streamType") or "").strip()
    if not stream_type:
        raise StreamError("stream config has no streamType")
    with _registry_lock:
        factory = registry.get(stream_type)
        known = ", ".join(sorted(registry)) or "none"
    if factory is None:
        raise UnknownStreamType(
            f"stream type {stream_type!r} has no plugin in this installation (known: {known})"
        )
    topic = stream_config.get(f"stream.{stream_type}.topic.name")
    if not topic:
        raise StreamError(f"stream config has no stream.{stream_type}.topic.name")
    return topic, factory
