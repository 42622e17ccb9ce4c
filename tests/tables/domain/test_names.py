"""Table names, LLC segment names and uploaded realtime segment names (reference §2.3, §2.4)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from tables.domain.names import (
    MAX_FILE_NAME_BYTES,
    MAX_RAW_TABLE_NAME_LENGTH,
    MAX_SCHEMA_NAME_LENGTH,
    MAX_SEGMENT_NAME_LENGTH,
    OFFLINE,
    REALTIME,
    InvalidName,
    LLCSegmentName,
    UploadedRealtimeSegmentName,
    check_schema_name,
    check_segment_name,
    check_table_name,
    format_creation_time,
    is_llc_segment_name,
    is_uploaded_realtime_segment_name,
    parse_creation_time,
    raw_table_name,
    schema_name_problem,
    segment_name_problem,
    split_by_whole_separator,
    table_name_problem,
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


# --- names from outside: where they go ------------------------------------------------------------

CHARSET = "only ASCII letters, digits, '_' and '-' are allowed"
INT_MAX = 2**31 - 1
SEPARATED = "must not contain '__' (it separates the parts of segment names)"
TOO_LONG = "at most 137 are allowed (the files made from it must fit the 255-byte limit)"


@pytest.mark.parametrize(
    "name", ["githubEvents", "t", "t_REALTIME", "t_OFFLINE", "my-table_2", "9lives", "A" * 137]
)
def test_good_table_names(name):
    assert table_name_problem(name) is None
    assert check_table_name(name) == name


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "table name must be a non-empty string"),
        (None, "table name must be a non-empty string"),
        (7, "table name must be a non-empty string"),
        ("a/b", f"table name 'a/b' has the character '/' at position 1: {CHARSET}"),
        ("..", f"table name '..' has the character '.' at position 0: {CHARSET}"),
        ("a.b", f"table name 'a.b' has the character '.' at position 1: {CHARSET}"),
        (
            "a\x00",
            f"table name 'a\\x00' has the control character '\\x00' at position 1: {CHARSET}",
        ),
        (
            "a\x7f",
            f"table name 'a\\x7f' has the control character '\\x7f' at position 1: {CHARSET}",
        ),
        ("my table", f"table name 'my table' has whitespace ' ' at position 2: {CHARSET}"),
        (
            "t\u00e9st",
            f"table name 't\u00e9st' has the non-ASCII character '\u00e9' at position 1: {CHARSET}",
        ),
        (
            "\uff41",
            f"table name '\uff41' has the non-ASCII character '\uff41' at position 0: {CHARSET}",
        ),
        (
            "a%2Fb",
            "table name 'a%2Fb' has the character '%' (a percent-encoded name is not decoded "
            f"again) at position 1: {CHARSET}",
        ),
        ("_staging", "table name '_staging' must start with an ASCII letter or digit"),
        ("-rf", "table name '-rf' must start with an ASCII letter or digit"),
        ("_REALTIME", "table name '_REALTIME' must start with an ASCII letter or digit"),
        (
            "a__b",
            "table name 'a__b' " + SEPARATED,
        ),
        (
            "a_",
            "table name 'a__REALTIME' " + SEPARATED,
        ),
        (
            "a__REALTIME",
            "table name 'a__REALTIME' " + SEPARATED,
        ),
    ],
)
def test_bad_table_names_name_the_rule(name, problem):
    assert table_name_problem(name) == problem
    if isinstance(name, str):
        with pytest.raises(InvalidName, match="table name"):
            check_table_name(name)


def test_the_raw_name_length_is_limited_not_the_suffix():
    longest = "t" * MAX_RAW_TABLE_NAME_LENGTH
    assert table_name_problem(longest) is None
    assert table_name_problem(longest + "_REALTIME") is None
    problem = table_name_problem(longest + "t")
    assert problem == (
        f"raw table name {'t' * 40 + '...'!r} is 138 characters long; at most 137 are allowed "
        "(the files made from it must fit the 255-byte limit)"
    )


def test_the_longest_names_make_files_that_fit(tmp_path):
    """The longest raw name, the largest partition and sequence: every file name the code makes
    from the segment fits the file system's limit, and one more character would not."""
    raw = "t" * MAX_RAW_TABLE_NAME_LENGTH
    segment = str(LLCSegmentName.create(raw, INT_MAX, INT_MAX, 4102444799000))  # 2099-12-31
    assert len(segment) == MAX_SEGMENT_NAME_LENGTH
    assert segment_name_problem(segment) is None
    tag = uuid.uuid4().hex
    made = [
        f"{segment}.{tag}.parquet.tmp-{tag}",  # staged rows while published (the longest)
        f"{segment}.tmp.{tag}.tmp-{tag}",  # a committer's upload while published
        f"{segment}.tar.gz.tmp-{tag}",  # a segment while published
        f"{segment}.tar.gz.part-{tag}",  # a server's download
        f"{raw}_REALTIME",
    ]
    assert max(len(name.encode()) for name in made) == MAX_FILE_NAME_BYTES
    for name in made:
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(OSError, match="too long"):
        (tmp_path / f"t{made[0]}").write_bytes(b"")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("githubEvents", None),
        ("s" * MAX_SCHEMA_NAME_LENGTH, None),
        ("a__b", None),  # only table names separate segment name parts
        ("", "schema name must be a non-empty string"),
        ("../x", f"schema name '../x' has the character '.' at position 0: {CHARSET}"),
        (
            "a\x00",
            f"schema name 'a\\x00' has the control character '\\x00' at position 1: {CHARSET}",
        ),
        (
            "s" * 300,
            f"schema name {'s' * 40 + '...'!r} is 300 characters long; " + TOO_LONG,
        ),
    ],
)
def test_schema_names(name, problem):
    assert schema_name_problem(name) == problem
    if problem:
        with pytest.raises(InvalidName, match="schema name"):
            check_schema_name(name)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("t__0__1__20160609T2142Z", True),
        ("uploaded__t__1__20240530T0000Z__v1.2", True),
        ("..", False),
        (".", False),
        (".hidden", False),
        ("a/b", False),
        ("a\x00", False),
        ("s" * (MAX_SEGMENT_NAME_LENGTH + 1), False),
    ],
)
def test_segment_names(name, ok):
    assert (segment_name_problem(name) is None) is ok
    if not ok:
        with pytest.raises(InvalidName, match="segment name"):
            check_segment_name(name)
