"""Consuming-segment instance assignment without replica groups (reference §6.4).

Contract, following Pinot's `InstancePartitionsUtils.computeDefaultInstancePartitionsForTag` and
`RealtimeSegmentAssignment`:
- The default instance partitions are all instances carrying the server tag, sorted by name (Java
  `String.compareTo`, i.e. by UTF-16 code units), rotated left by
  `Math.abs(tableNameWithType.hashCode()) % numInstances` with Java int semantics: the hash wraps at
  32 bits, `Math.abs(Integer.MIN_VALUE)` stays negative and `%` keeps the dividend's sign, and a
  negative rotation wraps around as `Collections.rotate` does.
- Replica `r` of stream partition `p` goes to `rotated[(p * R + r) % N]`.
- `max_partitions_per_instance` is `ceil(numPartitions * numReplicas / numInstances)`.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AssignmentError",
    "consuming_instances_for_partition",
    "default_instance_partitions",
    "java_string_hash",
    "max_partitions_per_instance",
]

_INT32_MIN = -(2**31)


class AssignmentError(ValueError):
    """The instances at hand cannot host the table as configured."""


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def java_string_hash(s: str) -> int:
    """Java's `String.hashCode`: `h = 31*h + c` over UTF-16 code units, wrapping as a signed int."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return _to_int32(h)


def _java_abs(value: int) -> int:
    # Math.abs(Integer.MIN_VALUE) overflows back to Integer.MIN_VALUE.
    return value if value == _INT32_MIN else abs(value)


def _java_rem(dividend: int, divisor: int) -> int:
    """Java's `%`: the result takes the sign of the dividend."""
    remainder = abs(dividend) % abs(divisor)
    return -remainder if dividend < 0 else remainder


def _java_sort_key(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def default_instance_partitions(table_name_with_type: str, instances: Iterable[str]) -> list[str]:
    """The instances sorted by name, then rotated left by the table name's hash."""
    ordered = sorted(set(instances), key=_java_sort_key)
    if not ordered:
        return []
    count = len(ordered)
    start = _java_rem(_java_abs(java_string_hash(table_name_with_type)), count) % count
    return ordered[start:] + ordered[:start]


def consuming_instances_for_partition(
    table_name_with_type: str, instances: Iterable[str], partition: int, replication: int
) -> list[str]:
    """The `replication` instances that consume stream partition `partition`, replica 0 first."""
    rotated = default_instance_partitions(table_name_with_type, instances)
    if replication < 1:
        raise AssignmentError(f"{table_name_with_type}: replication must be at least 1")
    if partition < 0:
        raise AssignmentError(f"{table_name_with_type}: partition must not be negative")
    if not rotated:
        raise AssignmentError(f"{table_name_with_type}: no instances to assign segments to")
    count = len(rotated)
    if count < replication:
        raise AssignmentError(
            f"{table_name_with_type}: {count} instances for replication {replication};"
            f" need at least {replication}"
        )
    return [rotated[(partition * replication + replica) % count] for replica in range(replication)]


def max_partitions_per_instance(num_partitions: int, num_replicas: int, num_instances: int) -> int:
    """`ceil(num_partitions * num_replicas / num_instances)` (no replica groups)."""
    if num_instances < 1:
        raise AssignmentError("no instances to assign segments to")
    return -(-num_partitions * num_replicas // num_instances)
