"""Java String.hashCode, default instance partitions and consuming replica placement (§6.4)."""

from __future__ import annotations

from collections import Counter

import pytest

from tables.domain.assignment import (
    AssignmentError,
    consuming_instances_for_partition,
    default_instance_partitions,
    java_string_hash,
    max_partitions_per_instance,
)

SERVERS = ["Server_c_8098", "Server_a_8098", "Server_b_8098"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),
        ("myTable_REALTIME", 612857736),
        # U+1F600 is two UTF-16 code units: 31 * 0xD83D + 0xDE00.
        ("\U0001f600", 1772899),
    ],
)
def test_it_hashes_strings_like_java(text, expected):
    assert java_string_hash(text) == expected


def test_it_wraps_long_strings_at_32_bits():
    value = java_string_hash("x" * 1000)
    assert -(2**31) <= value < 2**31


def test_it_sorts_then_rotates_by_the_table_hash():
    servers = [f"s{i}" for i in (5, 3, 1, 4, 2)]
    # 612857736 % 5 == 1: rotate left by one.
    assert default_instance_partitions("myTable_REALTIME", servers) == [
        "s2",
        "s3",
        "s4",
        "s5",
        "s1",
    ]
    # 612857736 % 3 == 0: no rotation.
    assert default_instance_partitions("myTable_REALTIME", SERVERS) == sorted(SERVERS)
    assert default_instance_partitions("myTable_REALTIME", []) == []


def test_it_rotates_like_java_when_the_hash_is_integer_min_value():
    # Math.abs(MIN_VALUE) stays MIN_VALUE; MIN_VALUE % 3 == -2 in Java; Collections.rotate(list, 2)
    # moves every element two places right, i.e. one place left.
    assert default_instance_partitions("polygenelubricants", ["a", "b", "c"]) == ["b", "c", "a"]
    # MIN_VALUE % 4 == 0: no rotation.
    assert default_instance_partitions("polygenelubricants", ["a", "b", "c", "d"]) == [
        "a",
        "b",
        "c",
        "d",
    ]


def test_it_places_replica_r_of_partition_p_at_p_times_r_plus_r():
    rotated = default_instance_partitions("myTable_REALTIME", SERVERS)
    for partition in range(6):
        got = consuming_instances_for_partition("myTable_REALTIME", SERVERS, partition, 2)
        assert got == [rotated[(partition * 2) % 3], rotated[(partition * 2 + 1) % 3]]


def test_it_spreads_replicas_evenly():
    placed = Counter()
    for partition in range(4):
        replicas = consuming_instances_for_partition("myTable_REALTIME", SERVERS, partition, 2)
        assert len(set(replicas)) == 2
        placed.update(replicas)
    assert sum(placed.values()) == 8
    assert set(placed) == set(SERVERS)
    assert all(count in (2, 3) for count in placed.values())  # 8/3 rounded down or up


def test_it_explains_missing_instances():
    with pytest.raises(AssignmentError, match="no instances"):
        consuming_instances_for_partition("t_REALTIME", [], 0, 1)
    with pytest.raises(AssignmentError, match="2 instances for replication 3"):
        consuming_instances_for_partition("t_REALTIME", ["a", "b"], 0, 3)
    with pytest.raises(AssignmentError):
        consuming_instances_for_partition("t_REALTIME", ["a"], -1, 1)
    with pytest.raises(AssignmentError):
        consuming_instances_for_partition("t_REALTIME", ["a"], 0, 0)


def test_it_computes_max_partitions_per_instance():
    assert max_partitions_per_instance(4, 2, 3) == 3
    assert max_partitions_per_instance(4, 1, 4) == 1
    assert max_partitions_per_instance(5, 1, 4) == 2
    assert max_partitions_per_instance(0, 2, 3) == 0
    with pytest.raises(AssignmentError):
        max_partitions_per_instance(4, 2, 0)
