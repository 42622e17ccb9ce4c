"""The lead controller resource (reference §8): which controller partition leads which table.

Contract: the resource `leadControllerResource` has 24 partitions named
`leadControllerResource_<i>`; a table belongs to partition
`(murmur2(utf8(raw table name)) & 0x7fffffff) % num_partitions`, where `murmur2` is Kafka's 32-bit
MurmurHash2 (seed 0x9747b28c) returning a Java-signed int. The raw name (no `_REALTIME` suffix) is
hashed; Java's `String.hashCode` is not involved.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_NUM_PARTITIONS",
    "LEAD_CONTROLLER_RESOURCE",
    "lead_partition",
    "murmur2",
    "partition_id",
    "partition_name",
]

LEAD_CONTROLLER_RESOURCE = "leadControllerResource"
DEFAULT_NUM_PARTITIONS = 24

_MASK32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def _mul32(a: int, b: int) -> int:
    return (a * b) & _MASK32


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: 32-bit MurmurHash2 of `data` as a signed (Java int) value."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - length % 4
    for offset in range(0, whole, 4):
        k = int.from_bytes(data[offset : offset + 4], "little")
        k = _mul32(k, _M)
        k ^= k >> _R
        k = _mul32(k, _M)
        h = _mul32(h, _M) ^ k
    tail = data[whole:]
    if tail:
        # The tail bytes are xor-ed in from the highest one down, then mixed once.
        for index in range(len(tail) - 1, -1, -1):
            h ^= tail[index] << (8 * index)
        h = _mul32(h, _M)
    h ^= h >> 13
    h = _mul32(h, _M)
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def lead_partition(raw_table_name: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """The lead-controller partition of a table, from its raw name."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, not {num_partitions}")
    return (murmur2(raw_table_name.encode("utf-8")) & 0x7FFFFFFF) % num_partitions


def partition_name(i: int) -> str:
    """`leadControllerResource_<i>`."""
    return f"{LEAD_CONTROLLER_RESOURCE}_{i}"


def partition_id(name: str) -> int:
    """The number after the last `_` of a partition name."""
    text = name.rpartition("_")[2]
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"{name!r} is not a {LEAD_CONTROLLER_RESOURCE} partition name")
    return int(text)
