"""The row check for segments of a table that unnests arrays (complexTypeConfig.fieldsToUnnest):
one or more rows per offset, excused only for a segment that declares it (`UNNEST_FILE`, read
into `SegmentRows.unnested`); every other segment keeps one row per offset."""

from __future__ import annotations

from tables.domain.ledger import SegmentRows, StreamRows, check_rows


def name(sequence: int) -> str:
    return f"t__0__{sequence}__20240101T0000Z"


def stream(first: int, last: int) -> StreamRows:
    return StreamRows({o: f"k{o}" for o in range(first, last + 1)}, first, last + 1)


def rows(sequence: int, start: int, end: int, offsets: list[int], **extra) -> SegmentRows:
    return SegmentRows(name(sequence), start, end, offsets, **extra)


# Offsets 0..5 with 1, 3, 1, 2, 1, 1 rows (arrays of 0 or 1, 3, 1, 2, ... elements).
UNNESTED = [0, 1, 1, 1, 2, 3, 3, 4, 5]


def test_several_rows_per_offset_are_excused_for_an_unnesting_segment():
    segment = rows(0, 0, 6, UNNESTED, unnested=True, total_docs=len(UNNESTED))
    report = check_rows(0, [segment], stream(0, 5))
    assert report.ok, report.problems
    assert report.rows_checked == 9
    assert report.notes == [
        f"partition 0: segment {name(0)} [0, 6): 9 rows at 6 offsets: it unnests arrays "
        "(complexTypeConfig.fieldsToUnnest): several rows per offset excused"
    ]


def test_the_same_rows_in_a_segment_that_does_not_unnest_are_duplicates():
    report = check_rows(0, [rows(0, 0, 6, UNNESTED)], stream(0, 5))
    assert report.problems == [
        f"partition 0: duplicated rows: offsets [1, 2) (1 offset) are 3 times in segment "
        f"{name(0)}, keys 'k1'",
        f"partition 0: duplicated rows: offsets [3, 4) (1 offset) are twice in segment "
        f"{name(0)}, keys 'k3'",
    ]


def test_an_offset_without_a_row_is_still_missing_when_unnesting():
    held = [o for o in UNNESTED if o != 4]
    report = check_rows(0, [rows(0, 0, 6, held, unnested=True)], stream(0, 5))
    assert report.problems == [
        "partition 0: missing rows: offsets [4, 5) (1 offset) were produced but are in no "
        "segment, keys 'k4'"
    ]


def test_an_offset_in_two_unnesting_segments_is_still_duplicated():
    segments = [
        rows(0, 0, 6, UNNESTED, unnested=True),
        rows(1, 6, 9, [5, 5, 6, 7, 8], unnested=True),
    ]
    report = check_rows(0, segments, stream(0, 8))
    assert (
        f"partition 0: segment {name(1)} [6, 9) holds rows at offsets [5, 6) (1 offset) "
        in (report.problems[0])
    )
    assert report.problems[1] == (
        f"partition 0: duplicated rows: offsets [5, 6) (1 offset) are in 2 segments: "
        f"{name(0)}, {name(1)}, keys 'k5'"
    )
    assert len(report.problems) == 2


def test_total_docs_counts_rows_not_offsets():
    good = check_rows(0, [rows(0, 0, 6, UNNESTED, unnested=True, total_docs=9)], stream(0, 5))
    assert good.ok
    offsets = check_rows(0, [rows(0, 0, 6, UNNESTED, unnested=True, total_docs=6)], stream(0, 5))
    assert offsets.problems == [
        f"partition 0: segment {name(0)} [0, 6) holds 9 rows, but its ZooKeeper metadata says 6"
    ]


def test_the_filter_excuses_an_offset_left_without_rows_but_not_one_it_holds():
    held = [o for o in UNNESTED if o != 2]
    segment = rows(0, 0, 6, held, unnested=True, filtered=[2])
    report = check_rows(0, [segment], stream(0, 5))
    assert report.ok, report.problems
    assert any("1 row dropped by the table's filter" in n for n in report.notes)
    wrong = check_rows(0, [rows(0, 0, 6, UNNESTED, unnested=True, filtered=[3])], stream(0, 5))
    assert wrong.problems == [
        f"partition 0: segment {name(0)} [0, 6) declares offsets [3, 4) (1 offset) dropped by the "
        "filter, but they are outside its range or rows of it: not excused"
    ]


def test_every_unnested_row_is_compared_with_its_messages_key():
    keys = ["k0", "k1", "k1", "other", "k2", "k3", "k3", "k4", "k5"]
    segment = rows(0, 0, 6, UNNESTED, unnested=True, keys=keys)
    report = check_rows(0, [segment], stream(0, 5))
    assert report.problems == [
        f"partition 0: segment {name(0)} holds key 'other' at offset 1, but the stream has key "
        "'k1' there"
    ]
