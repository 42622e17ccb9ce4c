"""Kafka murmur2 and the table -> lead controller partition mapping (reference §8)."""

from __future__ import annotations

import pytest

from tables.domain.leadership import (
    DEFAULT_NUM_PARTITIONS,
    LEAD_CONTROLLER_RESOURCE,
    lead_partition,
    murmur2,
    partition_id,
    partition_name,
)

# Kafka's published vectors (UtilsTest.testMurmur2).
KAFKA_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("abc", 479470107),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
]


@pytest.mark.parametrize(("text", "expected"), KAFKA_VECTORS)
def test_it_matches_kafkas_murmur2_vectors(text, expected):
    assert murmur2(text.encode("utf-8")) == expected


def test_it_returns_java_signed_ints_for_every_tail_length():
    for length in range(12):
        value = murmur2(bytes(range(200, 200 + length)))
        assert -(2**31) <= value < 2**31


@pytest.mark.parametrize(
    ("table", "partition"),
    [
        ("myTable", 3),
        ("airlineStats", 19),
        ("githubEvents", 15),
        ("meetupRsvp", 9),
        ("baseballStats", 7),
    ],
)
def test_it_maps_raw_table_names_to_the_documented_partitions(table, partition):
    assert lead_partition(table, 24) == partition
    assert lead_partition(table) == partition


def test_it_refuses_a_resource_without_partitions():
    with pytest.raises(ValueError):
        lead_partition("myTable", 0)


def test_it_names_and_numbers_partitions():
    assert LEAD_CONTROLLER_RESOURCE == "leadControllerResource"
    assert DEFAULT_NUM_PARTITIONS == 24
    assert partition_name(0) == "leadControllerResource_0"
    assert partition_name(23) == "leadControllerResource_23"
    assert partition_id("leadControllerResource_17") == 17
    assert [partition_id(partition_name(i)) for i in range(24)] == list(range(24))
    with pytest.raises(ValueError):
        partition_id("leadControllerResource")
