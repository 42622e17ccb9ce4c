"""Offsets lost mid-consumption in the ledger: the committed segment declares them in its
`custom.map` (`consumption.lostOffsets`), and the check excuses exactly those.

Unit tests of `tables.ledger.declared_losses` with the domain checks, then `verify_table` on a real
ZooKeeper (ranges only: rows need Spark, see test_verify_ledger.py)."""

from __future__ import annotations

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.ledger import (
    LOST_OFFSETS_KEY,
    SegmentRange,
    SegmentRows,
    StreamRows,
    check_rows,
    format_offset_ranges,
    parse_offset_ranges,
)
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata, new_in_progress
from tables.domain.table_config import switch_stream_type
from tables.ledger import declared_losses, verify_table
from tables.zk.records import create_record, update_record
from tests.cluster_fixtures import PATHS, load


def name(sequence: int) -> str:
    return f"t__0__{sequence}__20240501T1030Z"


def done(sequence: int, start: int, end: int, lost: str | None = None):
    """A DONE segment of partition 0 as the ledger reads it: its range and its metadata."""
    meta = new_in_progress(name(sequence), str(start), 1, 100, 0).mark_done(
        end_offset=str(end),
        start_time_ms=0,
        end_time_ms=0,
        total_docs=end - start,
        crc=1,
        data_crc=1,
        size_in_bytes=1,
        download_url="",
        custom_map={LOST_OFFSETS_KEY: lost} if lost is not None else None,
    )
    found = SegmentRange(name(sequence), 0, sequence, "DONE", str(start), str(end))
    return found, meta


def test_offset_ranges_round_trip_and_malformed_text_is_refused():
    assert parse_offset_ranges("") == []
    assert parse_offset_ranges(format_offset_ranges([(3, 5), (7, 9)])) == [(3, 5), (7, 9)]
    assert format_offset_ranges([(3, 5), (7, 9)]) == "3-5,7-9"
    for bad in ("3", "3-", "-5", "5-5", "6-5", "a-b", "3-5,4-6", "7-9,3-5", "3-5,,7-9", "-1-5"):
        with pytest.raises(ValueError):
            parse_offset_ranges(bad)


def test_declared_losses_excuse_exactly_those_missing_rows():
    first, first_meta = done(0, 1, 21, lost="5-8,12-13")
    second, second_meta = done(1, 21, 31)
    ranges = [first, second]
    metadata = {first.segment: first_meta, second.segment: second_meta}
    losses, problems = declared_losses(ranges, metadata)
    assert problems == []
    assert [(lost.partition, lost.start, lost.end) for lost in losses] == [(0, 5, 8), (0, 12, 13)]

    # The stream (say a replica of it) still shows every offset; the segment lacks 5..7, 12, and
    # also 20, which it does not declare.
    missing = {5, 6, 7, 12, 20}
    rows = SegmentRows(first.segment, 1, 21, [o for o in range(1, 21) if o not in missing])
    stream = StreamRows(keys=dict.fromkeys(range(1, 31)), first_available=1, latest=31)
    report = check_rows(0, [rows], stream, losses)
    assert report.problems == [
        "partition 0: missing rows: offsets [20, 21) (1 offset) were produced but are in no segment"
    ]
    undeclared = check_rows(0, [rows], stream)
    assert len(undeclared.problems) == 3  # 5..7, 12 and 20


def test_a_declaration_that_does_not_parse_or_leaves_its_segment_excuses_nothing():
    segments = [done(0, 1, 11, lost="3-x"), done(1, 11, 21, "21-25"), done(2, 21, 31, "15-22")]
    ranges = [found for found, _ in segments]
    metadata = {found.segment: meta for found, meta in segments}
    losses, problems = declared_losses(ranges, metadata)
    assert losses == []
    assert problems == [
        f"partition 0: {name(0)} declares lost offsets '3-x' that do not parse: '3-x' is not an "
        "offset range 'start-end' (start < end)",
        f"partition 0: {name(1)} declares lost offsets '21-25' outside its range [11, 21): not "
        "excused",
        f"partition 0: {name(2)} declares lost offsets '15-22' outside its range [21, 31): not "
        "excused",
    ]


# --- verify_table, ranges only ---
TABLE = "githubEvents_REALTIME"


def _commit(manager: ResourceManager, zk, sequence: int, start: int, end: int, lost: str | None):
    first = next(n for n in manager.segment_names(TABLE) if n.startswith("githubEvents__0__0__"))
    creation = LLCSegmentName.parse(first).creation_time_ms
    segment = str(LLCSegmentName.create("githubEvents", 0, sequence, creation))
    facts = {
        "end_offset": str(end),
        "start_time_ms": 0,
        "end_time_ms": 0,
        "total_docs": end - start,
        "crc": 1,
        "data_crc": 1,
        "size_in_bytes": 1,
        "download_url": "",
        "custom_map": {LOST_OFFSETS_KEY: lost} if lost else None,
    }
    path = PATHS.segment(TABLE, segment)
    if sequence == 0:
        update_record(
            zk,
            path,
            lambda r: SegmentZKMetadata.from_znrecord(r).mark_done(**facts).to_znrecord(),
        )
    else:
        meta = new_in_progress(segment, str(start), 1, 100, 0).mark_done(**facts)
        create_record(zk, path, meta.to_znrecord())


@pytest.mark.zk
@pytest.mark.redis
def test_verify_table_reports_a_bad_declaration_and_never_excuses_a_gap_with_one(
    servers, zk, topic
):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    )
    _commit(manager, zk, 0, 1, 11, "3-5")
    report = verify_table(context.current(), TABLE)
    assert report.ok, report.problems
    assert (
        "partition 0: offsets [3, 5) were gone from the stream when the segment was consumed "
        "(declared data loss): excused"
    ) in report.notes

    _commit(manager, zk, 1, 15, 20, "11-15")  # a gap [11, 15), "declared" by the wrong segment
    report = verify_table(context.current(), TABLE)
    assert report.problems == [
        "partition 0: gap: offsets [11, 15) (4 offsets) are in no segment: "
        f"{_name(manager, 0)} ends at 11, {_name(manager, 1)} [15, 20) starts at 15",
        f"partition 0: {_name(manager, 1)} declares lost offsets '11-15' outside its range "
        "[15, 20): not excused",
    ]


def _name(manager: ResourceManager, sequence: int) -> str:
    return next(
        n for n in manager.segment_names(TABLE) if n.startswith(f"githubEvents__0__{sequence}__")
    )
