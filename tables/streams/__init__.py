"""Stream plugins behind one interface (see `base` for the offset and data-loss contract).

Importing this package registers the embedded Redis Streams plugin (`streamType: redis`) and the
Kafka plugin (`streamType: kafka`), each with its offset-range source (`range_source_for`).
"""

from tables.streams import kafka, kafka_range, redis_streams
from tables.streams.base import (
    LARGEST,
    SMALLEST,
    MessageBatch,
    RangeSource,
    StreamError,
    StreamMessage,
    StreamProvider,
    StreamUnavailable,
    TopicAdmin,
    TopicExists,
    TopicNotFound,
    UnknownStreamType,
    fetch_timeout_ms,
    offset_reset_criteria,
    provider_for,
    range_source_for,
    register_range_source,
    register_stream_type,
    stream_property,
    stream_types,
)

__all__ = [
    "LARGEST",
    "SMALLEST",
    "MessageBatch",
    "RangeSource",
    "StreamError",
    "StreamMessage",
    "StreamProvider",
    "StreamUnavailable",
    "TopicAdmin",
    "TopicExists",
    "TopicNotFound",
    "UnknownStreamType",
    "fetch_timeout_ms",
    "kafka",
    "kafka_range",
    "offset_reset_criteria",
    "provider_for",
    "range_source_for",
    "redis_streams",
    "register_range_source",
    "register_stream_type",
    "stream_property",
    "stream_types",
]
