"""The `streamType: kafka` stream config: Pinot's keys checked, and librdkafka's settings built.

See `tables.streams.kafka` for what the keys mean. `config_problems(stream_config)` lists what is
wrong (each message names its key); `client_config(stream_config)` returns the librdkafka
consumer settings or raises StreamError naming every problem. Client settings are those written
as plain keys (Pinot hands its whole stream config map to the Kafka client) and
`stream.kafka.consumer.prop.*` keys, prefix removed. The ones librdkafka knows are kept (its own
property table decides, read through ctypes from the library confluent-kafka bundles); unknown
ones are left out, as the Java client ignores them; invalid values are problems. Java-only
settings are translated where librdkafka has an equivalent and reported otherwise.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Mapping
from pathlib import Path

import confluent_kafka

from tables.streams.base import LARGEST, SMALLEST, StreamError

__all__ = [
    "CONSUMER_PROP",
    "DEFAULT_TIMEOUT_MS",
    "JSON_DECODERS",
    "PREFIX",
    "STREAM_TYPE",
    "client_config",
    "config_problems",
    "timeout_ms",
]

STREAM_TYPE = "kafka"
FIRST_OFFSET = 0
PREFIX = "stream.kafka."
CONSUMER_PROP = PREFIX + "consumer.prop."
JSON_DECODERS = frozenset(
    {
        "org.apache.pinot.plugin.inputformat.json.JSONMessageDecoder",
        "org.apache.pinot.plugin.stream.kafka.KafkaJSONMessageDecoder",
    }
)
_FACTORY = re.compile(r"org\.apache\.pinot\.plugin\.stream\.kafka\d*\.KafkaConsumerFactory")
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
DEFAULT_TIMEOUT_MS = 10_000
# Set by the plugin itself: a stream config cannot change them.
_OWNED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "false",
    "auto.offset.reset": "error",
    "allow.auto.create.topics": "false",
}
# Keys of Pinot's own (prefixed `stream.`/`realtime.` etc.) never go to the client.
_PINOT_KEY = re.compile(r"^(stream\.|streamType$|realtime\.|topic\.|segment\.)")
_JAAS_LOGIN = re.compile(r"(PlainLoginModule|ScramLoginModule)\s+required")
_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"([^"]*)"')


def _client_candidates(stream_config: Mapping[str, str]) -> dict[str, str]:
    """Every client setting the config carries: plain keys, then consumer.prop.* (which win)."""
    found = {k: str(v) for k, v in stream_config.items() if not _PINOT_KEY.match(k)}
    for key, value in stream_config.items():
        if key.startswith(CONSUMER_PROP) and key != CONSUMER_PROP + "auto.offset.reset":
            found[key[len(CONSUMER_PROP) :]] = str(value)
    return found


def _translated(settings: dict[str, str], problems: list[str]) -> dict[str, str]:
    """Java-client settings librdkafka spells differently, translated (or reported)."""
    out = dict(settings)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        fields = dict(_JAAS_FIELD.findall(jaas))
        if _JAAS_LOGIN.search(jaas) and "username" in fields and "password" in fields:
            out.setdefault("sasl.username", fields["username"])
            out.setdefault("sasl.password", fields["password"])
        else:
            problems.append(
                "sasl.jaas.config: only the PLAIN and SCRAM login modules with username and "
                "password can be translated for librdkafka; set sasl.* properties instead"
            )
    truststore = out.pop("ssl.truststore.location", None)
    store_type = out.pop("ssl.truststore.type", "JKS").upper()
    out.pop("ssl.truststore.password", None)
    if truststore is not None:
        if store_type == "PEM":
            out.setdefault("ssl.ca.location", truststore)
        else:
            problems.append(
                f"ssl.truststore.location: librdkafka cannot read a {store_type} truststore; "
                "convert it to PEM and set ssl.ca.location (or ssl.truststore.type=PEM)"
            )
    if out.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"  # the Java client's "off"
    return out


@functools.cache
def _librdkafka() -> ctypes.CDLL | None:
    """The librdkafka confluent-kafka runs on (its wheel bundles one), for its property table."""
    libs = Path(confluent_kafka.__file__).parent.with_name("confluent_kafka.libs")
    bundled = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    try:
        lib = ctypes.CDLL(str(bundled[0]) if bundled else "librdkafka.so.1")
    except OSError:
        return None
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    return lib


_CONF_UNKNOWN, _CONF_INVALID = -2, -1


def _known(settings: Mapping[str, str], problems: list[str]) -> dict[str, str]:
    """The settings librdkafka knows; invalid values become problems, unknown names are left out
    (the Java client ignores them too). Without the library every setting is kept (the consumer
    then rejects bad ones when it is built)."""
    lib = _librdkafka()
    if lib is None:
        return dict(settings)
    conf = lib.rd_kafka_conf_new()
    errstr = ctypes.create_string_buffer(512)
    kept: dict[str, str] = {}
    try:
        for name, value in settings.items():
            res = lib.rd_kafka_conf_set(conf, name.encode(), value.encode(), errstr, 512)
            if res == _CONF_INVALID:
                problems.append(f"{name}: {errstr.value.decode(errors='replace')}")
            elif res != _CONF_UNKNOWN:
                kept[name] = value
    finally:
        lib.rd_kafka_conf_destroy(conf)
    return kept


def _isolation_level(stream_config: Mapping[str, str]) -> str | None:
    return stream_config.get(PREFIX + "isolation.level") or None


def timeout_ms(stream_config: Mapping[str, str], problems: list[str] | None = None) -> int:
    raw = stream_config.get(PREFIX + "connection.timeout.millis")
    if raw is None or not str(raw).strip():
        return DEFAULT_TIMEOUT_MS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        if problems is None:
            raise StreamError(
                f"{PREFIX}connection.timeout.millis={raw!r} is not a positive integer"
            )
        problems.append(f"{PREFIX}connection.timeout.millis: {raw!r} is not a positive integer")
        return DEFAULT_TIMEOUT_MS
    return value


def _build(stream_config: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    problems: list[str] = []
    if not stream_config.get(PREFIX + "topic.name"):
        problems.append(f"{PREFIX}topic.name is missing")
    brokers = (stream_config.get(PREFIX + "broker.list") or "").strip()
    if not brokers:
        problems.append(f"{PREFIX}broker.list is missing (host:port[,host:port...])")
    decoder = stream_config.get(PREFIX + "decoder.class.name")
    if not decoder:
        problems.append(f"{PREFIX}decoder.class.name is missing (use {min(JSON_DECODERS)})")
    elif decoder not in JSON_DECODERS:
        problems.append(
            f"{PREFIX}decoder.class.name: {decoder!r} is not supported; messages are decoded as "
            f"JSON ({', '.join(sorted(JSON_DECODERS))})"
        )
    factory = stream_config.get(PREFIX + "consumer.factory.class.name")
    if factory and not _FACTORY.fullmatch(factory):
        problems.append(
            f"{PREFIX}consumer.factory.class.name: {factory!r} is not one of Pinot's Kafka "
            "consumer factories (org.apache.pinot.plugin.stream.kafka<NN>.KafkaConsumerFactory)"
        )
    reset = stream_config.get(CONSUMER_PROP + "auto.offset.reset")
    if reset is not None and reset.strip().lower() not in (SMALLEST, LARGEST):
        problems.append(
            f"{CONSUMER_PROP}auto.offset.reset: {reset!r} is not supported (use {SMALLEST!r} "
            f"or {LARGEST!r})"
        )
    isolation = _isolation_level(stream_config)
    if isolation is not None and isolation not in _ISOLATION_LEVELS:
        problems.append(
            f"{PREFIX}isolation.level: {isolation!r} is not one of {', '.join(_ISOLATION_LEVELS)}"
        )
    timeout_ms(stream_config, problems)
    settings = _translated(_client_candidates(stream_config), problems)
    config = _known(settings, problems)
    if isolation is not None:
        config["isolation.level"] = isolation
    config["bootstrap.servers"] = brokers
    config.setdefault("group.id", f"pinot-{stream_config.get(PREFIX + 'topic.name', '')}")
    # A re-assigned partition waits for the fetch in flight: keep that wait short.
    config.setdefault("fetch.wait.max.ms", "100")
    # librdkafka stops fetching a partition for this long once its local queue holds
    # `queued.min.messages` (100k): 1 s by default, which caps a consumer catching up at about
    # 100k rows a second per partition (bench/ingest.py --stream kafka).
    config.setdefault("fetch.queue.backoff.ms", "10")
    config.update(_OWNED)
    return config, problems


def config_problems(stream_config: Mapping[str, str]) -> list[str]:
    """What is wrong with a `streamType: kafka` config, one message per problem naming its key
    (empty: the config is usable). Pure: reads nothing but the map (and librdkafka's own table
    of property names and values)."""
    return _build(stream_config)[1]


def client_config(stream_config: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka consumer settings for a stream config; StreamError listing its problems."""
    config, problems = _build(stream_config)
    if problems:
        raise StreamError("kafka stream config: " + "; ".join(problems))
    return config
