"""Re-reading an offset range of one Kafka partition (the `RangeSource` of `streamType: kafka`).

`KafkaRangeSource` holds the topic, the partition, the librdkafka consumer settings of the stream
config (`kafka_config.client_config`, the ones the provider uses) and the connection timeout: plain
values, so it pickles into Spark tasks. `read(start, end, lost)` runs there: it builds its own
consumer, asks for the partition's watermarks, assigns the partition at `start` (no group
membership, no commits) and consumes in batches of `page_size` until it passes `end - 1` or
reaches the high watermark (librdkafka's partition-EOF event: nothing more will come), then closes
the consumer. It yields `(offset, value bytes)` in offset order.

Kafka offsets are sparse: transaction markers take offsets without being messages, aborted
transactions are skipped under read_committed and compaction leaves holes; none of that is loss.
Loss is a read below the low watermark only: a start below it, or retention overtaking the reader
(librdkafka runs with `auto.offset.reset=error` and reports "offset out of range"). Each such range
`[first_missing, low watermark)` goes to the `lost` callback (the watermark may lie beyond `end`)
and the read continues from the low watermark. Nothing read for the connection timeout raises
`StreamUnavailable`; other client errors raise `StreamError` (`TopicNotFound` for a topic the
cluster does not know).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Mapping
from typing import TYPE_CHECKING

import confluent_kafka

from tables.streams.base import (
    LossCallback,
    RangeSource,
    StreamError,
    StreamUnavailable,
    TopicNotFound,
    register_range_source,
)
from tables.streams.kafka_config import STREAM_TYPE, client_config, timeout_ms

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError

__all__ = ["PAGE_SIZE", "KafkaRangeSource", "range_source_from_config"]

PAGE_SIZE = 1000  # messages per consume call
POLL_S = 0.5  # one consume call waits at most this long
# The task code refers to confluent-kafka through its module only: its classes live in a module
# named `cimpl`, which cloudpickle cannot find by that name (and pickles them wrongly by value).
_ERR = confluent_kafka.KafkaError
_EOF = _ERR._PARTITION_EOF
_OUT_OF_RANGE = frozenset({_ERR._AUTO_OFFSET_RESET, _ERR.OFFSET_OUT_OF_RANGE})
_NO_TOPIC = frozenset({_ERR.UNKNOWN_TOPIC_OR_PART, _ERR._UNKNOWN_TOPIC})
_UNREACHABLE = frozenset({_ERR._TRANSPORT, _ERR._TIMED_OUT, _ERR._ALL_BROKERS_DOWN})
del _ERR

_Rows = Generator[tuple[int, bytes], None, tuple[int, bool]]


def _stream_error(error: KafkaError, what: str) -> StreamError:
    if error.code() in _NO_TOPIC:
        return TopicNotFound(f"{what}: {error.str()}")
    if error.retriable() or error.code() in _UNREACHABLE:
        return StreamUnavailable(f"{what}: Kafka is not reachable ({error.str()})")
    return StreamError(f"{what}: {error.str()}")


class KafkaRangeSource(RangeSource):
    """One Kafka partition re-read by offset range (see the module docstring)."""

    dense = False

    def __init__(
        self,
        topic: str,
        partition: int,
        config: Mapping[str, str],
        timeout_s: float,
        page_size: int = PAGE_SIZE,
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, not {page_size}")
        self.topic = topic
        self.partition = partition
        self.config = {**config, "enable.partition.eof": "true"}  # the end of the log is an event
        self.timeout_s = timeout_s
        self.page_size = page_size

    def __repr__(self) -> str:
        return f"KafkaRangeSource({self.topic!r}, {self.partition})"

    @property
    def _where(self) -> str:
        return f"topic {self.topic!r} partition {self.partition}"

    def read(
        self, start: int, end: int, lost: LossCallback | None = None
    ) -> Iterator[tuple[int, bytes]]:
        consumer = confluent_kafka.Consumer(self.config)
        try:
            yield from self._read(consumer, start, end, lost)
        finally:
            consumer.close()

    def _watermarks(self, consumer: Consumer) -> tuple[int, int]:
        tp = confluent_kafka.TopicPartition(self.topic, self.partition)
        try:
            return consumer.get_watermark_offsets(tp, timeout=self.timeout_s, cached=False)
        except confluent_kafka.KafkaException as exc:
            raise _stream_error(exc.args[0], self._where) from None

    def _read(
        self, consumer: Consumer, start: int, end: int, lost: LossCallback | None
    ) -> Iterator[tuple[int, bytes]]:
        low, high = self._watermarks(consumer)
        stop, position = min(end, high), start
        while position < stop:
            if position < low:
                if lost is not None:
                    lost(position, low)
                position = low
                continue
            consumer.assign([confluent_kafka.TopicPartition(self.topic, self.partition, position)])
            position, out_of_range = yield from self._consume(consumer, position, stop)
            if not out_of_range:
                return
            low = self._watermarks(consumer)[0]  # retention overtook the reader
            if low <= position:
                raise StreamError(
                    f"{self._where}: offset {position} is out of range, yet the low watermark "
                    f"is {low}"
                )

    def _consume(self, consumer: Consumer, position: int, stop: int) -> _Rows:
        """Rows from the assigned `position` up to `stop`; returns (where it stopped, whether
        the broker said "offset out of range")."""
        idle_since = time.monotonic()
        while True:
            # `consume` waits until it has that many: never ask for more than the range can hold.
            messages = consumer.consume(min(self.page_size, stop - position), POLL_S)
            if not messages:
                if time.monotonic() - idle_since > self.timeout_s:
                    raise StreamUnavailable(
                        f"{self._where}: nothing came from offset {position} in "
                        f"{self.timeout_s:g} s (offsets up to {stop - 1} are expected)"
                    )
                continue
            idle_since = time.monotonic()
            for message in messages:
                error = message.error()
                if error is None:
                    offset = message.offset()
                    if offset >= stop:
                        return position, False
                    yield offset, message.value() or b""
                    position = offset + 1
                    if position >= stop:
                        return position, False
                elif error.code() == _EOF:
                    return max(position, message.offset()), False  # nothing more will come
                elif error.code() in _OUT_OF_RANGE:
                    return position, True
                else:
                    raise _stream_error(error, self._where)


def range_source_from_config(
    topic: str, stream_config: Mapping[str, str], default_redis_url: str, partition: int
) -> KafkaRangeSource:
    """The registered range-source factory: StreamError naming every problem of the config."""
    return KafkaRangeSource(
        topic, partition, client_config(stream_config), timeout_ms(stream_config) / 1000
    )


register_range_source(STREAM_TYPE, range_source_from_config)
