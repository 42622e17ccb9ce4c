"""The exactly-once ledger checks: committed offset ranges, and rows against the stream."""

from __future__ import annotations

from tables.domain.ledger import (
    MAX_LINES_PER_KIND,
    LedgerReport,
    LostRange,
    SegmentRange,
    SegmentRows,
    StreamRows,
    check_ranges,
    check_rows,
    combine,
    parse_offset,
)


def seg(partition: int, sequence: int, start, end, status: str = "DONE") -> SegmentRange:
    return SegmentRange(
        f"t__{partition}__{sequence}__20240101T0000Z",
        partition,
        sequence,
        status,
        None if start is None else str(start),
        None if end is None else str(end),
    )


def name(partition: int, sequence: int) -> str:
    return f"t__{partition}__{sequence}__20240101T0000Z"


def stream(first: int, last: int, keys=None, latest: int | None = None) -> StreamRows:
    """Messages at offsets first..last, keyed k<offset> unless `keys` says otherwise."""
    produced = {o: f"k{o}" for o in range(first, last + 1)}
    produced.update(keys or {})
    return StreamRows(produced, first, last + 1 if latest is None else latest)


def rows(sequence: int, start: int, end: int, offsets=None, **extra) -> SegmentRows:
    held = list(range(start, end)) if offsets is None else offsets
    return SegmentRows(name(0, sequence), start, end, held, **extra)


# --- ranges --------------------------------------------------------------------------------------


def test_contiguous_segments_are_ok_in_sequence_order_whatever_the_input_order():
    report = check_ranges(
        [seg(0, 2, 200, 300), seg(0, 0, 1, 100), seg(0, 1, 100, 200), seg(1, 5, 7, 7)]
    )
    assert report.ok and report.problems == []
    assert (report.partitions, report.segments, report.open_segments) == (2, 4, 0)
    assert report.summary().startswith("ok: 2 partitions, 4 DONE segments")


def test_a_gap_names_both_segments_and_the_missing_offsets():
    report = check_ranges([seg(0, 0, 1, 100), seg(0, 1, 100, 200), seg(0, 2, 205, 300)])
    assert not report.ok
    assert report.problems == [
        f"partition 0: gap: offsets [200, 205) (5 offsets) are in no segment: {name(0, 1)} "
        f"ends at 200, {name(0, 2)} [205, 300) starts at 205"
    ]
    assert report.summary().startswith("FAILED (1 problem)")


def test_an_overlap_names_the_shared_offsets():
    report = check_ranges([seg(0, 0, 1, 100), seg(0, 1, 90, 200), seg(0, 2, 200, 300)])
    assert report.problems == [
        f"partition 0: overlap: {name(0, 1)} [90, 200) and {name(0, 0)} both cover offsets "
        "[90, 100) (10 offsets)"
    ]


def test_a_segment_inside_an_earlier_one_overlaps_it_and_the_next_is_still_contiguous():
    report = check_ranges([seg(0, 0, 1, 100), seg(0, 1, 10, 20), seg(0, 2, 100, 150)])
    assert report.problems == [
        f"partition 0: overlap: {name(0, 1)} [10, 20) and {name(0, 0)} both cover offsets "
        "[10, 20) (10 offsets)"
    ]


def test_segments_out_of_sequence_order_are_reported():
    report = check_ranges([seg(0, 0, 1, 10), seg(0, 1, 20, 30), seg(0, 2, 10, 20)])
    assert len(report.problems) == 2
    assert "gap: offsets [10, 20)" in report.problems[0]
    assert report.problems[1].startswith(f"partition 0: out of order: {name(0, 2)} [10, 20)")


def test_open_segments_are_noted_and_must_start_where_the_committed_ones_end():
    good = check_ranges(
        [seg(0, 0, 1, 100), seg(0, 1, 100, 150, "COMMITTING"), seg(0, 2, 150, None, "IN_PROGRESS")]
    )
    assert good.ok
    assert (good.segments, good.open_segments) == (1, 2)
    assert good.notes == [
        f"partition 0: open segment {name(0, 1)} [100, 150) is COMMITTING",
        f"partition 0: open segment {name(0, 2)} (from 150) is IN_PROGRESS",
    ]

    late = check_ranges([seg(0, 0, 1, 100), seg(0, 1, 120, None, "IN_PROGRESS")])
    assert late.problems == [
        f"partition 0: gap: offsets [100, 120) (20 offsets) are in no segment: {name(0, 0)} "
        f"ends at 100, {name(0, 1)} (from 120) starts at 120"
    ]
    early = check_ranges([seg(0, 0, 1, 100), seg(0, 1, 95, None, "IN_PROGRESS")])
    assert early.problems == [
        f"partition 0: open segment {name(0, 1)} (from 95) (IN_PROGRESS) starts at 95, but "
        f"{name(0, 0)} ends at 100: offsets [95, 100) (5 offsets) would be consumed twice"
    ]


def test_an_abandoned_consuming_segment_replaced_at_the_same_offset_is_fine():
    # Pinot's repair: segment 1 stays IN_PROGRESS, segment 2 restarts from its start offset.
    report = check_ranges(
        [
            seg(0, 0, 1, 100),
            seg(0, 1, 100, None, "IN_PROGRESS"),
            seg(0, 2, 100, 180),
            seg(0, 3, 180, None, "IN_PROGRESS"),
        ]
    )
    assert report.ok and report.open_segments == 2


def test_a_gap_exactly_equal_to_a_counted_loss_is_excused_and_any_other_is_not():
    segments = [seg(0, 0, 1, 100), seg(0, 1, 150, 200), seg(1, 0, 1, 10), seg(1, 1, 20, 30)]
    report = check_ranges(segments, [LostRange(0, 100, 150), LostRange(1, 10, 15)])
    assert report.notes == [
        f"partition 0: offsets [100, 150) (50 offsets) before {name(0, 1)} [150, 200) were lost "
        "by the stream (counted data loss): gap excused"
    ]
    assert report.problems == [
        f"partition 1: gap: offsets [10, 20) (10 offsets) are in no segment: {name(1, 0)} ends "
        f"at 10, {name(1, 1)} [20, 30) starts at 20 (known lost [10, 15) does not match it "
        "exactly)"
    ]


def test_bad_offsets_duplicate_sequences_and_uploaded_segments():
    report = check_ranges(
        [
            seg(0, 0, 1, None),
            seg(0, 1, 50, 40),
            SegmentRange("t__0__1__20240102T0000Z", 0, 1, "DONE", "1", "50"),
            seg(0, 2, "x", None, "IN_PROGRESS"),
            seg(0, 3, 1, 2, "UPLOADED"),
        ]
    )
    assert report.problems == [
        f"partition 0: DONE segment {name(0, 0)} has no valid offset range "
        "(startOffset='1', endOffset=None)",
        f"partition 0: DONE segment {name(0, 1)} has no valid offset range "
        "(startOffset='50', endOffset='40')",
        f"partition 0: segments {name(0, 1)} and t__0__1__20240102T0000Z both have sequence "
        "number 1",
        f"partition 0: IN_PROGRESS segment {name(0, 2)} has no valid offset range "
        "(startOffset='x', endOffset=None)",
    ]
    assert report.notes == [f"partition 0: {name(0, 3)} is UPLOADED: not part of the stream ledger"]
    assert [parse_offset(v) for v in ("12", 12, " 7", "-1", -1, "1.5", None)] == [
        12,
        12,
        7,
        None,
        None,
        None,
        None,
    ]


# --- rows ----------------------------------------------------------------------------------------


def test_every_produced_row_once_in_its_segment_is_ok():
    report = check_rows(0, [rows(0, 1, 11, total_docs=10), rows(1, 11, 21)], stream(1, 25))
    assert report.ok and report.rows_checked == 20
    assert report.notes == []


def test_missing_rows_are_one_line_per_run_with_their_keys():
    segments = [rows(0, 1, 11, [1, 2, 3, 7, 8, 9, 10]), rows(1, 11, 21)]
    report = check_rows(0, segments, stream(1, 20))
    assert report.problems == [
        "partition 0: missing rows: offsets [4, 7) (3 offsets) were produced but are in no "
        "segment, keys 'k4', 'k5', 'k6'"
    ]


def test_a_row_in_two_segments_or_twice_in_one_is_duplicated():
    segments = [rows(0, 1, 11, [*range(1, 11), 5]), rows(1, 11, 21, [*range(9, 21)])]
    report = check_rows(0, segments, stream(1, 20))
    assert report.problems == [
        f"partition 0: segment {name(0, 1)} [11, 21) holds rows at offsets [9, 11) (2 offsets) "
        "outside its range",
        f"partition 0: duplicated rows: offsets [5, 6) (1 offset) are twice in segment "
        f"{name(0, 0)}, keys 'k5'",
        f"partition 0: duplicated rows: offsets [9, 11) (2 offsets) are in 2 segments: "
        f"{name(0, 0)}, {name(0, 1)}, keys 'k9', 'k10'",
    ]


def test_a_row_outside_its_segments_range_is_reported():
    report = check_rows(0, [rows(0, 1, 11, [*range(1, 10), 12])], stream(1, 12))
    assert report.problems == [
        f"partition 0: segment {name(0, 0)} [1, 11) holds rows at offsets [12, 13) (1 offset) "
        "outside its range",
        "partition 0: missing rows: offsets [10, 11) (1 offset) were produced but are in no "
        "segment, keys 'k10'",
    ]


def test_duplicate_production_rows_never_produced_and_key_mismatches():
    produced = stream(1, 10, keys={7: "k2", 9: None})
    segments = [
        rows(0, 1, 13, [*range(1, 13)], keys=[f"k{o}" for o in range(1, 13)], total_docs=11)
    ]
    report = check_rows(0, segments, produced)
    assert report.problems == [
        f"partition 0: segment {name(0, 0)} [1, 13) holds 12 rows, but its ZooKeeper metadata "
        "says 11",
        f"partition 0: segment {name(0, 0)} [1, 13) holds rows at offsets [11, 13) (2 offsets) "
        "that were never produced (the partition's next offset is 11)",
        f"partition 0: segment {name(0, 0)} holds key 'k7' at offset 7, but the stream has key "
        "'k2' there",
        "partition 0: duplicate production: key 'k2' was produced at offsets 2, 7",
    ]
    assert report.notes == [
        "partition 0: 1 produced message without a key field: not checked for duplicate production"
    ]


def test_trimmed_offsets_are_not_compared_and_counted_losses_are_not_missing():
    # The stream kept offsets 6..20; offsets 15..16 were lost inside the segment's range.
    produced = stream(6, 20)
    del produced.keys[15], produced.keys[16]
    segment = rows(0, 1, 21, [o for o in range(1, 21) if o not in (15, 16)])
    report = check_rows(0, [segment], produced, [LostRange(0, 15, 17)])
    assert report.ok
    assert report.notes == [
        "partition 0: 5 segment rows at offsets the stream no longer holds (it starts at "
        "6): not compared"
    ]
    lost_rows = check_rows(0, [rows(0, 1, 11, [1, 2, 3])], stream(1, 10), [LostRange(0, 4, 11)])
    assert lost_rows.ok


def test_an_unreadable_segment_fails_without_listing_its_rows_as_missing():
    segments = [
        rows(0, 1, 11),
        SegmentRows(name(0, 1), 11, 21, error="not in the deep store at file:///x"),
    ]
    report = check_rows(0, segments, stream(1, 20))
    assert report.problems == [
        f"partition 0: segment {name(0, 1)} [11, 21) cannot be read: not in the deep store at "
        "file:///x; its offsets [11, 21) (10 offsets) are not verified"
    ]
    assert report.rows_checked == 10


def test_each_kind_of_row_problem_is_capped():
    held = list(range(1, 200, 2))  # every other offset: 99 runs of one missing offset
    report = check_rows(0, [rows(0, 1, 200, held)], stream(1, 199))
    assert len(report.problems) == MAX_LINES_PER_KIND + 1
    assert report.problems[-1] == "... and 79 more lines of missing rows"


def test_combine_keeps_the_range_counts_and_adds_the_rows():
    ranges = check_ranges([seg(0, 0, 1, 11), seg(1, 0, 1, 5, "IN_PROGRESS")])
    first = check_rows(0, [rows(0, 1, 11)], stream(1, 10))
    second = LedgerReport(problems=["p"], notes=["n"], rows_checked=3)
    report = combine(ranges, [first, second])
    assert (report.partitions, report.segments, report.open_segments) == (2, 1, 1)
    assert report.rows_checked == 13
    assert report.problems == ["p"] and report.notes[-1] == "n" and not report.ok


def test_a_declared_replay_excuses_exactly_its_overlaps_and_duplicates():
    """A resume from smallest at 1 after consumption stopped at 200: [1, 200) again."""
    replay = LostRange(0, 1, 200, "were consumed again by a resume from smallest")
    segments = [
        seg(0, 0, 1, 100),
        seg(0, 1, 100, 200),
        seg(0, 2, 1, 150),  # the replay, in two segments
        seg(0, 3, 150, 260),  # crosses where consumption had stopped
        seg(0, 4, 260, 300),
    ]
    report = check_ranges(segments, replayed=[replay])
    assert report.ok, report.problems
    assert sum("overlap excused" in note for note in report.notes) == 2
    assert not check_ranges(segments).ok  # undeclared, the same overlaps are problems
    assert not check_ranges(segments, replayed=[LostRange(0, 50, 200, "x")]).ok  # not from 1

    held = [rows(0, 1, 100), rows(1, 100, 200), rows(2, 1, 150), rows(3, 150, 260)]
    checked = check_rows(0, held, stream(1, 259), replayed=[replay])
    assert checked.ok, checked.problems
    assert any("199 rows held twice" in note for note in checked.notes)
    assert not check_rows(0, held, stream(1, 259)).ok
    # A third copy is still a duplicate.
    third = check_rows(0, [*held, rows(4, 1, 5)], stream(1, 259), replayed=[replay])
    assert any("duplicated rows: offsets [1, 5)" in p for p in third.problems)


def test_rows_the_filter_dropped_are_excused_exactly_when_the_segment_declares_them():
    held = [0, 1, 3, 6, 7, 9]
    dropped = [2, 4, 5, 8]
    report = check_rows(0, [rows(0, 0, 10, held, filtered=dropped)], stream(0, 9))
    assert report.ok, report.problems
    assert any("4 rows dropped by the table's filter" in n for n in report.notes)
    # Undeclared, a dropped row is a missing row.
    report = check_rows(0, [rows(0, 0, 10, held, filtered=[2, 4, 5])], stream(0, 9))
    assert report.problems == [
        "partition 0: missing rows: offsets [8, 9) (1 offset) were produced but are in no "
        "segment, keys 'k8'"
    ]


def test_a_declared_filtered_offset_outside_the_range_or_held_excuses_nothing():
    report = check_rows(0, [rows(0, 0, 4, [0, 1, 2], filtered=[2, 3, 7])], stream(0, 7))
    assert not report.ok
    declared = [p for p in report.problems if "dropped by the filter" in p]
    assert len(declared) == 2  # offset 2 (held) and offset 7 (outside [0, 4))
    assert "[2, 3)" in declared[0] and "[7, 8)" in declared[1]
    assert not any("missing rows" in p for p in report.problems)  # offset 3 stays excused
