"""Pinot's SegmentStatusChecker and MissingConsumingSegmentFinder semantics, gauge by gauge."""

from __future__ import annotations

from tables.domain.status_checks import (
    DEFAULT_WAIT_FOR_PUSH_MS,
    MissingConsuming,
    SegmentFacts,
    StatusCheck,
    StreamFacts,
    TableFacts,
    check_table,
    missing_consuming,
)

NOW = 1_800_000_000_000
WAIT = DEFAULT_WAIT_FOR_PUSH_MS
OLD = NOW - WAIT - 60_000  # changed long enough ago to be judged
MINUTE = 60_000
A, B, C = "Server_a_1", "Server_b_2", "Server_c_3"


def seg(
    name: str = "t__0__0__20240101T0000Z",
    ideal: dict | None = None,
    external: dict | None = None,
    **fields,
) -> SegmentFacts:
    ideal = {A: "ONLINE", B: "ONLINE"} if ideal is None else ideal
    external = dict(ideal) if external is None else external
    fields.setdefault("mtime_ms", OLD)
    return SegmentFacts(name=name, ideal=ideal, external=external, **fields)


def llc(partition: int, sequence: int, state: str = "ONLINE", **fields) -> SegmentFacts:
    fields.setdefault("ideal", {A: state, B: state})
    return seg(
        f"t__{partition}__{sequence}__20240101T0000Z",
        partition=partition,
        sequence=sequence,
        **fields,
    )


def check(*segments: SegmentFacts, **facts) -> StatusCheck:
    return check_table(TableFacts("t_REALTIME", list(segments), **facts), NOW, WAIT)


# --- segmentsInErrorState -------------------------------------------------------------------------


def test_error_state_counts_segment_replica_pairs():
    result = check(
        seg("s1", external={A: "ERROR", B: "ERROR"}),
        seg("s2", external={A: "ONLINE", B: "ERROR"}),
        seg("s3"),
    )
    assert result.segments_in_error_state == 3
    assert result.error_replicas == (("s1", A), ("s1", B), ("s2", B))


def test_error_replicas_of_segments_not_judged_are_not_counted():
    result = check(
        seg("all-offline", ideal={A: "OFFLINE", B: "OFFLINE"}, external={A: "ERROR"}),
        seg("no-metadata", external={A: "ERROR", B: "ONLINE"}, has_metadata=False),
        seg("just-committed", external={A: "ERROR", B: "ONLINE"}, mtime_ms=NOW - 5 * MINUTE),
        seg("ev-only", ideal={}, external={A: "ERROR"}),
    )
    assert result.segments_in_error_state == 0
    assert result.without_metadata == ("no-metadata",)


def test_the_wait_for_push_boundary_is_inclusive_and_creation_time_stands_in():
    at_limit = seg("at-limit", external={A: "ERROR", B: "ONLINE"}, mtime_ms=NOW - WAIT)
    inside = seg("inside", external={A: "ERROR", B: "ONLINE"}, mtime_ms=NOW - WAIT + 1)
    no_mtime = seg(
        "no-mtime", external={A: "ERROR", B: "ONLINE"}, mtime_ms=None, creation_time_ms=NOW - 1
    )
    unknown = seg("unknown", external={A: "ERROR", B: "ONLINE"}, mtime_ms=None)
    result = check(at_limit, inside, no_mtime, unknown)
    assert result.error_replicas == (("at-limit", A), ("unknown", A))


# --- percentSegmentsAvailable ---------------------------------------------------------------------


def test_available_percent_is_an_integer_over_every_idealstate_segment():
    assert check(seg("s1"), seg("s2")).percent_segments_available == 100
    offline = seg("gone", external={})
    assert check(seg("s1"), seg("s2"), offline).percent_segments_available == 66
    # The young segment is not judged but still counts in the denominator (as Pinot's does).
    young = seg("young", external={}, mtime_ms=NOW)
    assert check(young, offline).percent_segments_available == 50


def test_a_replica_on_an_instance_that_does_not_serve_is_not_available():
    result = check(seg("s1", external={A: "ONLINE", B: "ONLINE"}), queryable={C})
    assert result.percent_segments_available == 0
    assert result.offline_segments == ("s1",)
    assert check(seg("s1"), queryable={A}).segments_with_less_replicas == 1


def test_error_and_offline_replicas_are_not_available():
    result = check(seg("s1", external={A: "ERROR", B: "OFFLINE"}), seg("s2"))
    assert result.percent_segments_available == 50
    assert result.segments_in_error_state == 1


# --- segmentsWithLessReplicas, numberOfReplicas, percentOfReplicas --------------------------------


def test_fewer_replicas_up_than_in_the_idealstate():
    result = check(
        seg("partial", external={A: "ONLINE", B: "ERROR"}),
        seg("whole"),
        seg("extra", external={A: "ONLINE", B: "ONLINE", C: "ONLINE"}),
    )
    assert result.segments_with_less_replicas == 1
    assert result.partial_segments == ("partial",)
    assert result.number_of_replicas == 1
    assert result.percent_of_replicas == 50


def test_replica_counts_are_capped_by_the_idealstate():
    result = check(seg("s", ideal={A: "ONLINE", B: "OFFLINE"}, external={A: "ONLINE", B: "ONLINE"}))
    assert result.segments_with_less_replicas == 0
    assert result.number_of_replicas == 1
    assert result.percent_of_replicas == 50  # 1 up of the 2 IdealState replicas


def test_without_a_judged_segment_the_replicas_are_the_idealstates():
    result = check(seg("young", ideal={A: "ONLINE", B: "ONLINE", C: "ONLINE"}, mtime_ms=NOW))
    assert (result.number_of_replicas, result.percent_of_replicas) == (3, 100)
    only_offline = check(seg("off", ideal={A: "OFFLINE"}), replicas=2)
    assert (only_offline.number_of_replicas, only_offline.percent_of_replicas) == (2, 100)


def test_an_idealstate_without_segments():
    result = check(seg("ev-only", ideal={}, external={A: "ERROR"}), replicas=3, paused=True)
    assert result == StatusCheck(number_of_replicas=3, table_consumption_paused=True)
    assert result.missing is None


def test_paused_follows_the_idealstate():
    assert check(seg("s"), paused=True).table_consumption_paused is True
    assert check(seg("s")).table_consumption_paused is False


# --- missingConsumingSegment* ---------------------------------------------------------------------


def test_with_the_stream_known_partitions_behind_it_count_from_their_creation_time():
    stream = StreamFacts(frozenset({0, 1, 2, 3}), {1: 150, 2: 150, 3: 10})
    result = check(
        llc(0, 4, "CONSUMING"),
        llc(1, 2, end_offset=100, creation_time_ms=NOW - 7 * MINUTE - 30_000),
        llc(2, 2, end_offset=150, creation_time_ms=NOW - 60 * MINUTE),
        stream=stream,
    )
    assert result.missing == MissingConsuming(2, 1, 7, (1, 3))


def test_the_latest_online_segment_of_a_partition_decides():
    stream = StreamFacts(frozenset({0}), {0: 200})
    caught_up = [llc(0, 1, end_offset=100), llc(0, 2, end_offset=200)]
    assert missing_consuming(caught_up, stream, NOW).total == 0
    behind = [llc(0, 3, end_offset=100), llc(0, 2, end_offset=200)]
    assert missing_consuming(behind, stream, NOW).total == 1


def test_a_consuming_segment_anywhere_in_the_partition_is_enough():
    stream = StreamFacts(frozenset({0}), {0: 500})
    segments = [llc(0, 1, "CONSUMING"), llc(0, 2, end_offset=100)]
    assert missing_consuming(segments, stream, NOW).total == 0


def test_a_partition_whose_segments_are_all_offline_is_new_when_the_stream_is_known():
    segments = [llc(0, 1, "OFFLINE")]
    assert missing_consuming(segments, StreamFacts(frozenset({0}), {0: 5}), NOW) == (
        MissingConsuming(1, 1, 0, (0,))
    )
    assert missing_consuming(segments, StreamFacts(), NOW).total == 0  # Pinot's fallback


def test_without_the_stream_every_online_partition_counts_from_its_mtime():
    result = missing_consuming(
        [
            llc(0, 1, end_offset=100, mtime_ms=NOW - 3 * MINUTE),
            llc(1, 1, end_offset=100, mtime_ms=NOW - 12 * MINUTE - 59_999),
            llc(2, 1, "CONSUMING"),
            llc(3, 1, "OFFLINE"),
        ],
        StreamFacts(),
        NOW,
    )
    assert result == MissingConsuming(2, 0, 12, (0, 1))


def test_an_empty_partition_list_is_the_fallback_and_unknown_offsets_fall_back_one_by_one():
    segments = [llc(0, 1, end_offset=100, mtime_ms=NOW - 4 * MINUTE)]
    assert missing_consuming(segments, StreamFacts(frozenset()), NOW).total == 1
    # The mirror's reported offsets: partition 0 known (caught up), partition 1 not.
    segments.append(llc(1, 1, end_offset=9, mtime_ms=NOW - 2 * MINUTE))
    reported = StreamFacts(None, {0: 100})
    assert missing_consuming(segments, reported, NOW) == MissingConsuming(1, 0, 2, (1,))


def test_durations_never_go_negative_and_unknown_times_only_count():
    stream = StreamFacts(frozenset({0, 1}), {0: 10, 1: 10})
    segments = [
        llc(0, 1, end_offset=5, creation_time_ms=NOW + 10 * MINUTE),
        llc(1, 1, end_offset=5, creation_time_ms=None),
    ]
    assert missing_consuming(segments, stream, NOW) == MissingConsuming(2, 0, 0, (0, 1))


def test_an_unknown_end_offset_counts_as_behind():
    stream = StreamFacts(frozenset({0}), {0: 10})
    assert missing_consuming([llc(0, 1, end_offset=None)], stream, NOW).total == 1


def test_uploaded_segments_and_offline_tables_are_left_out():
    uploaded = seg("uploaded_segment_1")  # no LLC name: no partition
    assert missing_consuming([uploaded], StreamFacts(), NOW).total == 0
    assert check(llc(0, 1), realtime=False).missing is None
    assert check(llc(0, 1)).missing == MissingConsuming(1, 0, 11, (0,))  # mtime: OLD


def test_details_name_what_was_counted():
    result = check(
        llc(0, 1, external={A: "ERROR", B: "ONLINE"}, end_offset=3),
        stream=StreamFacts(frozenset({0, 1}), {0: 3}),
    )
    assert result.details() == {
        "errorReplicas": [["t__0__1__20240101T0000Z", A]],
        "offlineSegments": [],
        "segmentsWithLessReplicas": ["t__0__1__20240101T0000Z"],
        "segmentsWithoutMetadata": [],
        "missingConsumingPartitions": [1],
    }
