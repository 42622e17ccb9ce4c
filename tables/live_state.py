"""Live consumption state: what each server is consuming right now, published to Redis.

Every server rewrites one Redis hash, `pinot:live:<cluster>:<instance>`, every
LIVE_PUBLISH_SECONDS, in one MULTI (DEL + HSET + EXPIRE), with a TTL of LIVE_STATE_TTL_SECONDS:
a server that stops publishing (killed, partitioned, stuck) disappears when its key expires,
which readers report as "not reporting" rather than as stale figures.

Hash field `<tableNameWithType>|<segmentName>` -> JSON object (`PartitionLive.to_dict`):
  segmentName, partition, consumerState (CONSUMING | NOT_CONSUMING, as Pinot), phase (our
  finer state: CONSUMING, HOLDING, CATCHING_UP, COMMITTING, ...), currentOffset, upstreamOffset,
  recordsLag, availabilityLagMs, lastConsumedMs, rowsConsumed (the partition's count over the
  process life, as Pinot's meter), rowsPerSecond, lostOffsets, updatedMs, phaseSinceMs (when the
  current phase began: it changes only when the phase does, so a duration counted from it never
  resets while a phase lasts), completingSinceMs (when the replica left CONSUMING to complete
  the segment; None while it consumes), stoppedReason (why a failed consumer stopped: the reason
  it sent with segmentStoppedConsuming; None otherwise) and holdReason (why a HOLDING consumer
  asks the controller nothing: its build backing off after a deterministic failure, with the
  next try; None otherwise).
Offsets are ints (Redis Streams offsets in this project are ints); None when unknown. The two
since-fields, stoppedReason and holdReason are optional: an entry without them (an older server)
reads as None.

Readers (`tables.mirror.sync`, the controller's consumingSegmentsInfo) use `read_all`, which costs
one pipelined round trip for every server of the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import redis

__all__ = ["PartitionLive", "key_for", "publish", "read_all", "read_server"]

KEY_PREFIX = "pinot:live"


@dataclass(frozen=True)
class PartitionLive:
    """One consuming segment on one server; field names are the JSON keys."""

    table: str
    segmentName: str
    partition: int
    consumerState: str
    phase: str
    currentOffset: int | None
    upstreamOffset: int | None
    recordsLag: int
    availabilityLagMs: int
    lastConsumedMs: int | None
    rowsConsumed: int
    rowsPerSecond: float
    lostOffsets: int
    updatedMs: int
    phaseSinceMs: int | None = None
    completingSinceMs: int | None = None
    stoppedReason: str | None = None
    holdReason: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> PartitionLive:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})  # type: ignore[arg-type]


def key_for(cluster: str, instance: str) -> str:
    return f"{KEY_PREFIX}:{cluster}:{instance}"


def publish(
    client: redis.Redis, cluster: str, instance: str, items: Iterable[PartitionLive], ttl_s: float
) -> None:
    """Replace `instance`'s hash with `items`, atomically, expiring after `ttl_s`."""
    key = key_for(cluster, instance)
    mapping = {f"{i.table}|{i.segmentName}": json.dumps(i.to_dict()) for i in items}
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    if mapping:
        pipe.hset(key, mapping=mapping)
    # A server with nothing to consume still publishes an empty marker, so it reads as reporting.
    pipe.hset(key, "_", "1")
    pipe.pexpire(key, int(ttl_s * 1000))
    pipe.execute()


def _decode(raw: dict[bytes, bytes]) -> list[PartitionLive] | None:
    if not raw:
        return None
    out = []
    for field, value in raw.items():
        if field == b"_":
            continue
        try:
            out.append(PartitionLive.from_dict(json.loads(value)))
        except (ValueError, TypeError):
            continue  # a malformed entry is skipped, not fatal to the reader
    return out


def read_server(client: redis.Redis, cluster: str, instance: str) -> list[PartitionLive] | None:
    """What `instance` last published, or None when it is not reporting (key expired)."""
    return _decode(client.hgetall(key_for(cluster, instance)))


def read_all(
    client: redis.Redis, cluster: str, instances: Iterable[str]
) -> dict[str, list[PartitionLive] | None]:
    """`read_server` for every instance, in one pipelined round trip."""
    names = list(instances)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(key_for(cluster, name))
    return {name: _decode(raw) for name, raw in zip(names, pipe.execute(), strict=True)}
