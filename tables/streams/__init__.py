"""Stream plugins behind one interface (see `base` for the offset and data-loss contract).

Importing this package registers the embedded Redis Streams plugin (`streamType: redis`) and the
Kafka plugin (`streamType: kafka`).
"""

from tables.streams import kafka, redis_streams
from tables.streams.base import (
    LARGEST,
    SMALLEST,
    MessageBatch,
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
    register_stream_type,
    stream_property,
    stream_types,
)

__all__ = [
    "LARGEST",
    "SMALLEST",
    "MessageBatch",
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
    "offset_reset_criteria",
    "provider_for",
    "redis_streams",
    "register_stream_type",
    "stream_property",
    "stream_types",
]
