"""Table names, LLC segment names and uploaded realtime segment names (reference §2.3, §2.4)."""

from __future__ import annotations

import dataclasses

import pytest

from tables.domain.names import (
    OFFLINE,
    REALTIME,
    InvalidName,
    LLCSegmentName,
    UploadedRealtimeSegmentName,
    format_creation_time,
    is_llc_segment_name,
    is_uploaded_realtime_segment_name,
    parse_creation_time,
    raw_table_name,
    split_by_whole_separator,
    table_name_with_type,
    table_type_of,
)

DOC_MS = 1465508537069  # 2016-06-09T21:42:17.069Z


# --- table names ----------------------------------------------------------------------------------


def test_it_adds_the_type_suffix_idempotently():
    assert table_name_with_type("t") == "t_REALTIME"
    assert table_name_with_type("t_REALTIME") == "t_REALTIME"
    assert table_name_with_type("t", OFFLINE) == "t_OFFLINE"
    assert table_name_with_type("t_OFFLINE", OFFLINE) == "t_OFFLINE"


def test_it_refuses_the_other_types_suffix_and_empty_names():
    with pytest.raises(InvalidName):
        table_name_with_type("t_OFFLINE")
    with pytest.raises(InvalidName):
        table_name_with_type("t_REALTIME", OFFLINE)
    with pytest.raises(InvalidName):
        table_name_with_type("")
    with pytest.raises(InvalidName):
        table_name_with_type("_REALTIME")
    with pytest.raises(InvalidName):
        table_name_with_type("t", "HYBRID")


def test_it_strips_and_reports_the_type():
    assert raw_table_name("t_REALTIME") == "t"
    assert raw_table_name("t_OFFLINE") == "t"
    assert raw_table_name("t") == "t"
    assert table_type_of("t_REALTIME") == REALTIME
    assert table_type_of("t_OFFLINE") == OFFLINE
    assert table_type_of("t") is None


# --- creation time --------------------------------------------------------------------------------


def test_it_formats_the_creation_time_in_utc_minutes():
    assert format_creation_time(DOC_MS) == "20160609T2142Z"
    assert format_creation_time(0) == "19700101T0000Z"
    assert format_creation_time(-1) == "19691231T2359Z"


def test_it_parses_the_creation_time():
    assert parse_creation_time("20160609T2142Z") == 1465508520000
    for bad in ("2016-06-09T2142Z", "20160609T2142", "20161309T2142Z", "20160609T2542Z", ""):
        with pytest.raises(InvalidName):
            parse_creation_time(bad)


# --- LLC names ------------------------------------------------------------------------------------


def test_it_builds_the_documented_example():
    name = LLCSegmentName.create("myTable", 0, 1, DOC_MS)
    assert str(name) == "myTable__0__1__20160609T2142Z"
    assert name.segment_name == "myTable__0__1__20160609T2142Z"
    assert name.creation_time == "20160609T2142Z"
    assert name.creation_time_ms == 1465508520000


def test_it_parses_what_it_builds():
    name = LLCSegmentName.parse("myTable__3__17__20240501T1131Z")
    assert name == LLCSegmentName("myTable", 3, 17, "20240501T1131Z")
    assert (name.table_name, name.partition_group_id, name.sequence_number) == ("myTable", 3, 17)
    assert str(name) == "myTable__3__17__20240501T1131Z"


def test_it_refuses_to_create_bad_names():
    for table in ("", "my__table"):
        with pytest.raises(InvalidName):
            LLCSegmentName.create(table, 0, 0, DOC_MS)
    with pytest.raises(InvalidName):
        LLCSegmentName.create("t", -1, 0, DOC_MS)
    with pytest.raises(InvalidName):
        LLCSegmentName.create("t", 0, -1, DOC_MS)
    with pytest.raises(InvalidName):
        LLCSegmentName.create("t", 2**31, 0, DOC_MS)


def test_it_splits_like_commons_lang_split_by_whole_separator():
    assert split_by_whole_separator("a__b__c") == ["a", "b", "c"]
    assert split_by_whole_separator("a____b") == ["a", "b"]
    assert split_by_whole_separator("__a") == ["a"]
    assert split_by_whole_separator("a___b") == ["a", "_b"]
    # The remainder after the last separator is always kept, even when empty.
    assert split_by_whole_separator("a__") == ["a", ""]
    assert split_by_whole_separator("a____") == ["a", ""]
    assert split_by_whole_separator("__") == [""]
    assert split_by_whole_separator("") == []


def test_it_collapses_adjacent_separators_when_parsing():
    original = "a____0__1__20200101T0000Z"
    name = LLCSegmentName.parse(original)
    assert name is not None
    assert (name.table_name, name.partition_group_id, name.sequence_number) == ("a", 0, 1)
    assert name.creation_time == "20200101T0000Z"
    # The original text is kept: that is the znode and IdealState key.
    assert str(name) == original
    assert name != LLCSegmentName.parse("a__0__1__20200101T0000Z")
    assert name.sort_key == (0, 1)
    leading = LLCSegmentName.parse("__t__0__1__20200101T0000Z")
    assert leading is not None
    assert leading.table_name == "t"


def test_it_handles_triple_underscores_as_pinot_does():
    # "___" is one separator plus a "_" that starts the next token.
    assert LLCSegmentName.parse("my___table__0__1__20200101T0000Z") is None  # 5 tokens
    assert LLCSegmentName.parse("t___0__1__20200101T0000Z") is None  # "_0" is not an int
    assert LLCSegmentName.parse("t__0___1__20200101T0000Z") is None  # "_1" is not an int
    odd = LLCSegmentName.parse("t__0__1___20200101T0000Z")
    assert odd is not None
    assert odd.creation_time == "_20200101T0000Z"
    with pytest.raises(InvalidName):
        _ = odd.creation_time_ms
    trailing = LLCSegmentName.parse("t__0__1__")
    assert trailing is not None
    assert trailing.creation_time == ""


def test_it_parses_ints_as_java_does():
    plus = LLCSegmentName.parse("t__+1__2__20200101T0000Z")
    assert plus is not None
    assert plus.partition_group_id == 1
    for bad in (
        "t__1_0__2__20200101T0000Z",
        "t__ 1__2__20200101T0000Z",
        "t__2147483648__2__20200101T0000Z",
        "t__x__2__20200101T0000Z",
        "t__0__1",
        "uploaded__t__1__20240530T0000Z__suffix",
        "plainSegmentName",
    ):
        assert LLCSegmentName.parse(bad) is None, bad


def test_it_recognises_llc_names_by_counting_separators():
    assert is_llc_segment_name("myTable__0__1__20160609T2142Z")
    assert is_llc_segment_name("a______")  # three non-overlapping "__"
    assert not is_llc_segment_name("a_____")  # only two
    assert not is_llc_segment_name("a____0__1__20200101T0000Z")  # four
    assert not is_llc_segment_name("uploaded__t__1__20240530T0000Z__suffix")
    assert not is_llc_segment_name("myTable_0_1")


def test_it_computes_the_next_segment():
    first = LLCSegmentName.create("myTable", 2, 7, DOC_MS)
    later = DOC_MS + 3_600_000
    following = first.next(later)
    assert str(following) == "myTable__2__8__20160609T2242Z"


def test_it_orders_by_partition_then_sequence_and_ignores_time():
    a = LLCSegmentName("t", 0, 5, "20300101T0000Z")
    b = LLCSegmentName("t", 1, 0, "20200101T0000Z")
    c = LLCSegmentName("t", 1, 2, "20100101T0000Z")
    assert sorted([c, b, a]) == [a, b, c]
    assert a < b < c
    assert c >= b
    with pytest.raises(ValueError):
        _ = a < LLCSegmentName("other", 0, 0, "20200101T0000Z")


def test_it_drops_the_original_text_when_fields_change():
    parsed = LLCSegmentName.parse("a____0__1__20200101T0000Z")
    moved = dataclasses.replace(parsed, sequence_number=2)
    assert str(moved) == "a__0__2__20200101T0000Z"


# --- uploaded realtime names ----------------------------------------------------------------------


def test_it_parses_uploaded_realtime_names():
    name = UploadedRealtimeSegmentName.parse("uploaded__table_name__1__20240530T0000Z__suffix")
    assert name is not None
    assert name.prefix == "uploaded"
    assert name.table_name == "table_name"
    assert name.partition_id == 1
    assert name.creation_time == "20240530T0000Z"
    assert name.suffix == "suffix"
    assert str(name) == "uploaded__table_name__1__20240530T0000Z__suffix"


def test_it_accepts_raw_millis_as_uploaded_creation_time():
    name = UploadedRealtimeSegmentName.parse("prefix__tableName__1__1234567890__suffix")
    assert name is not None
    assert name.creation_time == "1234567890"


def test_it_builds_uploaded_names():
    name = UploadedRealtimeSegmentName.create("tableName", 1, 1717027200000, "uploaded", "2")
    assert str(name) == "uploaded__tableName__1__20240530T0000Z__2"
    with pytest.raises(InvalidName):
        UploadedRealtimeSegmentName.create("a__b", 1, 0, "uploaded", "2")
    with pytest.raises(InvalidName):
        UploadedRealtimeSegmentName.create("t", 1, 0, " ", "2")


def test_it_recognises_uploaded_names_and_rejects_others():
    assert is_uploaded_realtime_segment_name("uploaded__t__1__20240530T0000Z__s")
    assert not is_uploaded_realtime_segment_name("myTable__0__1__20160609T2142Z")
    assert UploadedRealtimeSegmentName.parse("myTable__0__1__20160609T2142Z") is None
    assert UploadedRealtimeSegmentName.parse("uploaded__t__x__20240530T0000Z__s") is None


def test_it_orders_uploaded_names_as_strings_within_a_table():
    a = UploadedRealtimeSegmentName.parse("uploaded__t__10__20240530T0000Z__a")
    b = UploadedRealtimeSegmentName.parse("uploaded__t__9__20240530T0000Z__a")
    assert a < b  # "1" < "9"
    with pytest.raises(ValueError):
        _ = a < UploadedRealtimeSegmentName.parse("uploaded__u__1__20240530T0000Z__a")
