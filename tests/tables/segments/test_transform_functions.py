"""Every supported ingestion transform function, on the real Spark build path (decode, then the
transform stages), table-driven.

Where an expected value comes from: "docs <page>" is the example of Pinot's documentation page
https://docs.pinot.apache.org/functions/json/<page> (its document is `DOCS_DATA`); "java" is the
result of Pinot's own implementation in
pinot-common `org.apache.pinot.common.function.scalar` (`ArithmeticFunctions`, `StringFunctions`,
`DateTimeFunctions`, `DateTimeConvert`, `JsonFunctions`) for that input, worked out from its code:
commons-lang `StringUtils`, Java `TimeUnit` and `Math`, Jackson's JSON printing.
"""

from __future__ import annotations

import json
import math

import pytest

from tables.domain.schema import parse_schema
from tables.segments import frames
from tables.segments.transforms import parse_transforms, transform_sources

pytestmark = pytest.mark.spark

MILLIS = 1585724400000  # 2020-04-01T07:00:00Z
JSON_DOC = {"name": "pinot", "n": 42, "d": 1.5, "tags": ["a", "b"], "o": {"k": "v"}}
DOCS_DATA = {
    "name": "Pete",
    "age": 24,
    "subjects": [
        {"name": "maths", "homework_grades": [80, 85, 90, 95, 100], "grade": "A", "score": 90},
        {"name": "english", "homework_grades": [60, 65, 70, 85, 90], "grade": "B", "score": 70},
    ],
}

# (expression, destination type, single value?, message, expected, source)
CASES: list[tuple[str, str, bool, dict, object, str]] = [
    # literals and nested calls
    ("1704067200000", "LONG", True, {}, 1704067200000, "a literal transform (issue 23)"),
    ("'fixed'", "STRING", True, {}, "fixed", "a string literal"),
    ("upper(concat(lower(a), 'X', '-'))", "STRING", True, {"a": "AbC"}, "ABC-X", "java"),
    ("plus(times(a, 2), 1)", "LONG", True, {"a": 20}, 41, "java: doubles, then long"),
    ("toEpochSeconds(fromEpochDays(a))", "LONG", True, {"a": 18353}, 1585699200, "java"),
    # math (ArithmeticFunctions, doubles)
    ("plus(a, b)", "DOUBLE", True, {"a": 1.5, "b": 2}, 3.5, "java"),
    ("add(a, b)", "DOUBLE", True, {"a": "1.5", "b": 2}, 3.5, "java: text is parsed"),
    ("minus(a, b)", "DOUBLE", True, {"a": 1, "b": 2.5}, -1.5, "java"),
    ("sub(a, b)", "LONG", True, {"a": 10, "b": 3}, 7, "java"),
    ("times(a, b)", "DOUBLE", True, {"a": 3, "b": 0.5}, 1.5, "java"),
    ("mult(a, b)", "INT", True, {"a": 3, "b": 4}, 12, "java"),
    ("divide(a, b)", "DOUBLE", True, {"a": 7, "b": 2}, 3.5, "java"),
    ("div(a, b)", "DOUBLE", True, {"a": 1, "b": 0}, math.inf, "java: 1.0 / 0.0"),
    ("divide(a, b)", "LONG", True, {"a": 7, "b": 2}, 3, "java: 3.5 to long truncates"),
    ("mod(a, b)", "DOUBLE", True, {"a": -7, "b": 3}, -1.0, "java: % keeps the dividend's sign"),
    ("abs(a)", "DOUBLE", True, {"a": -2.5}, 2.5, "java"),
    ("ceil(a)", "DOUBLE", True, {"a": 1.2}, 2.0, "java"),
    ("floor(a)", "DOUBLE", True, {"a": -1.2}, -2.0, "java"),
    ("exp(a)", "DOUBLE", True, {"a": 0}, 1.0, "java"),
    ("ln(a)", "DOUBLE", True, {"a": 1}, 0.0, "java"),
    ("sqrt(a)", "DOUBLE", True, {"a": 16}, 4.0, "java"),
    ("round(a, 1000)", "LONG", True, {"a": 1585724412345}, 1585724412000, "java"),
    # strings (StringFunctions)
    ("lower(a)", "STRING", True, {"a": "Pinot"}, "pinot", "java"),
    ("upper(a)", "STRING", True, {"a": "Pinot"}, "PINOT", "java"),
    ("concat(a, b)", "STRING", True, {"a": "a", "b": "b"}, "ab", "java"),
    ("concat(a, b, '-')", "STRING", True, {"a": "a", "b": "b"}, "a-b", "java: a + sep + b"),
    ("substr(a, 1)", "STRING", True, {"a": "Hello"}, "ello", "java: StringUtils.substring"),
    ("substr(a, 0, 2)", "STRING", True, {"a": "Hello"}, "He", "java"),
    ("substr(a, -3, -1)", "STRING", True, {"a": "Hello"}, "llo", "java: end -1 is the end"),
    ("substr(a, -3, 4)", "STRING", True, {"a": "Hello"}, "ll", "java: negative from end"),
    ("trim(a)", "STRING", True, {"a": "  x y  "}, "x y", "java"),
    ("ltrim(a)", "STRING", True, {"a": "  x  "}, "x  ", "java"),
    ("rtrim(a)", "STRING", True, {"a": "  x  "}, "  x", "java"),
    ("replace(a, 'l', 'L')", "STRING", True, {"a": "hello"}, "heLLo", "java"),
    ("regexpExtract(a, '([0-9]+)-([0-9]+)', 2)", "STRING", True, {"a": "x 12-34"}, "34", "java"),
    ("regexp_extract(a, 'z+')", "STRING", True, {"a": "abc"}, "", "java: no match: ''"),
    ("regexpExtract(a, 'z+', 0, 'none')", "STRING", True, {"a": "abc"}, "none", "java"),
    ("regexpReplace(a, '[0-9]', '#')", "STRING", True, {"a": "a1b22"}, "a#b##", "java"),
    ("split(a, ', ')", "STRING", False, {"a": "a, b, , c"}, ["a", "b", "c"], "java"),
    ("split(a, ',')", "STRING", False, {"a": ",a,,b,"}, ["a", "b"], "java: no empty pieces"),
    ("startsWith(a, 'pi')", "BOOLEAN", True, {"a": "pinot"}, True, "java"),
    ("starts_with(a, 'x')", "BOOLEAN", True, {"a": "pinot"}, False, "java"),
    # date and time (DateTimeFunctions, DateTimeConvert)
    ("fromDateTime(a, 'yyyy-MM-dd')", "LONG", True, {"a": "2020-04-01"}, 1585699200000, "java"),
    ("toDateTime(a, 'yyyy-MM-dd HH')", "STRING", True, {"a": MILLIS}, "2020-04-01 07", "java"),
    ("toDateTime(a, 'HH:mm', 'Asia/Kolkata')", "STRING", True, {"a": MILLIS}, "12:30", "java"),
    ("toEpochSeconds(a)", "LONG", True, {"a": MILLIS}, 1585724400, "java"),
    ("toEpochMinutes(a)", "LONG", True, {"a": MILLIS}, 26428740, "java"),
    ("toEpochHours(a)", "LONG", True, {"a": MILLIS}, 440479, "java"),
    ("toEpochDays(a)", "LONG", True, {"a": MILLIS}, 18353, "java"),
    ("toEpochMinutesRounded(a, 15)", "LONG", True, {"a": MILLIS}, 26428740, "java"),
    ("toEpochMinutesBucket(a, 15)", "LONG", True, {"a": MILLIS}, 1761916, "java"),
    ("toEpochSeconds(a)", "LONG", True, {"a": -1500}, -1, "java: TimeUnit truncates"),
    ("fromEpochDays(a)", "LONG", True, {"a": 18353}, 1585699200000, "java"),
    ("fromEpochHoursBucket(a, 2)", "LONG", True, {"a": 10}, 72000000, "java"),
    ("fromEpochSeconds(a)", "TIMESTAMP", True, {"a": 1}, 1000, "java, as epoch millis"),
    ("dateTrunc('day', a)", "LONG", True, {"a": MILLIS}, 1585699200000, "java"),
    ("dateTrunc('month', a, 'SECONDS')", "LONG", True, {"a": 1585724400}, 1585699200, "java"),
    ("dateTrunc('week', a)", "LONG", True, {"a": MILLIS}, 1585526400000, "java: Monday"),
    (
        "dateTimeConvert(a, '1:MILLISECONDS:EPOCH', '1:DAYS:EPOCH', '1:DAYS')",
        "LONG",
        True,
        {"a": MILLIS},
        18353,
        "java",
    ),
    (
        "dateTimeConvert(a, '1:MILLISECONDS:EPOCH', '1:MILLISECONDS:EPOCH', '15:MINUTES')",
        "LONG",
        True,
        {"a": MILLIS + 7 * 60_000},
        MILLIS,
        "java",
    ),
    (
        "dateTimeConvert(a, '1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss', "
        "'1:HOURS:SIMPLE_DATE_FORMAT:yyyyMMddHH', '1:HOURS')",
        "STRING",
        True,
        {"a": "2020-04-01 07:45:10"},
        "2020040107",
        "java",
    ),
    # JSON (JsonFunctions)
    ("jsonFormat(a)", "JSON", True, {"a": {"k": [1, 2]}}, '{"k":[1,2]}', "java: Jackson"),
    ("jsonFormat(a)", "STRING", True, {"a": "x"}, '"x"', "java: a string is quoted"),
    ("jsonPath(a, '$.o.k')", "STRING", True, {"a": JSON_DOC}, "v", "java"),
    ("jsonPathString(a, '$.age')", "STRING", True, {"a": DOCS_DATA}, "24", "docs jsonpathstring"),
    ("JSONPATHLONG(a, '$.age')", "LONG", True, {"a": DOCS_DATA}, 24, "docs jsonpathlong"),
    ("jsonPathString(a, '$.subjects[1].grade')", "STRING", True, {"a": DOCS_DATA}, "B", "java"),
    ("jsonPathString(a, '$.o')", "STRING", True, {"a": JSON_DOC}, '{"k":"v"}', "java"),
    ("jsonPathString(a, '$.nope', 'dflt')", "STRING", True, {"a": JSON_DOC}, "dflt", "java"),
    ("jsonPathLong(a, '$.n')", "LONG", True, {"a": JSON_DOC}, 42, "java"),
    ("jsonPathLong(a, '$.nope')", "LONG", True, {"a": JSON_DOC}, -(2**63), "java: MIN_VALUE"),
    ("jsonPathLong(a, '$.nope', 7)", "LONG", True, {"a": JSON_DOC}, 7, "java"),
    ("jsonPathDouble(a, '$.d')", "DOUBLE", True, {"a": JSON_DOC}, 1.5, "java"),
    ("jsonPathDouble(a, '$.nope', 2.5)", "DOUBLE", True, {"a": JSON_DOC}, 2.5, "java"),
    ("jsonPathArray(a, '$.tags')", "STRING", False, {"a": JSON_DOC}, ["a", "b"], "java"),
    ("jsonExtractScalar(a, '$.n', 'INT')", "INT", True, {"a": JSON_DOC}, 42, "java"),
    ("jsonExtractScalar(a, '$.name', 'STRING')", "STRING", True, {"a": JSON_DOC}, "pinot", "java"),
    ("jsonExtractScalar(a, '$.x', 'LONG', 5)", "LONG", True, {"a": JSON_DOC}, 5, "java"),
    ("toJsonMapStr(a)", "STRING", True, {"a": {"k": "v"}}, '{"k":"v"}', "java"),
    # nulls: a missing input gives null (no problem); toJsonMapStr takes a null
    ("lower(a)", "STRING", True, {}, None, "java: null in, null out"),
    ("plus(a, b)", "DOUBLE", True, {"a": 1}, None, "java: null in, null out"),
    ("toJsonMapStr(a)", "STRING", True, {}, "null", "java: nullableParameters"),
    ("jsonPathString(a, '$.x', 'd')", "STRING", True, {}, "d", "java: nullableParameters"),
    # multi-value inputs: a single-value parameter takes the first element (PinotDataType)
    ("plus(a, 1)", "DOUBLE", True, {"a": [10, 20]}, 11.0, "java: PinotDataType first element"),
    ("a", "INT", False, {"a": [1, 2]}, [1, 2], "a plain column"),
    ("upper(a)", "STRING", False, {"a": ["x", "y"]}, ["X"], "java: first element"),
    ("jsonFormat(a)", "STRING", True, {"a": [1, 2]}, "[1,2]", "java: an Object[] as JSON"),
]


def _schema(cases):
    specs = []
    for i, (_, data_type, single, _, _, _) in enumerate(cases):
        spec = {"name": f"c{i}", "dataType": data_type, "singleValueField": single}
        if data_type == "TIMESTAMP":
            specs.append({**spec, "format": "TIMESTAMP", "granularity": "1:MILLISECONDS"})
        else:
            specs.append(spec)
    dims = [s for s in specs if s["dataType"] != "TIMESTAMP"]
    times = [s for s in specs if s["dataType"] == "TIMESTAMP"]
    return parse_schema(
        {"schemaName": "functions", "dimensionFieldSpecs": dims, "dateTimeFieldSpecs": times}
    )


def _failures(spark, cases):
    """Every case of `cases` on one DataFrame: case i is row i and column c<i>."""
    schema = _schema(cases)
    configs = [
        {"columnName": f"c{i}", "transformFunction": case[0]} for i, case in enumerate(cases)
    ]
    transforms = parse_transforms(configs, schema)
    rows = [(i, json.dumps(case[3]).encode()) for i, case in enumerate(cases)]
    df = spark.createDataFrame(rows, "offset bigint, value binary")
    decoded = frames.decode(df, schema, transform_sources(transforms))
    out = frames.apply_transforms(decoded, transforms, schema)
    millis = [
        f"unix_millis(c{i}) AS c{i}" if case[1] == "TIMESTAMP" else f"c{i}"
        for i, case in enumerate(cases)
    ]
    got = {r["__offset"]: r for r in out.selectExpr("__offset", "__problems", *millis).collect()}
    failures = []
    for i, (expression, _, _, message, expected, source) in enumerate(cases):
        value = got[i][f"c{i}"]
        if isinstance(expected, float) and isinstance(value, float):
            same = value == expected or math.isclose(value, expected)
        else:
            same = value == expected
        problems = [p["raw"] for p in got[i]["__problems"] if p["column"] == f"c{i}"]
        if not same or problems:
            failures.append((expression, message, expected, value, problems, source))
    return failures


def test_every_supported_function_computes_as_pinot(spark):
    chunk = 24  # a few DataFrames: one select per transform, so plans stay small
    failures = []
    for start in range(0, len(CASES), chunk):
        failures += _failures(spark, CASES[start : start + chunk])
    assert failures == [], "\n".join(map(str, failures))


def test_rows_a_transform_rejects_are_problems_and_legitimate_nulls_are_not(spark):
    schema = parse_schema(
        {
            "schemaName": "rejects",
            "dimensionFieldSpecs": [
                {"name": "n", "dataType": "DOUBLE"},
                {"name": "p", "dataType": "STRING"},
                {"name": "t", "dataType": "LONG"},
            ],
        }
    )
    transforms = parse_transforms(
        [
            {"columnName": "n", "transformFunction": "plus(a, 1)"},
            {"columnName": "p", "transformFunction": "jsonPathString(j, '$.missing')"},
            {"columnName": "t", "transformFunction": "fromDateTime(s, 'yyyy-MM-dd')"},
        ],
        schema,
    )
    message = {"a": "not a number", "j": {"x": 1}, "s": "not a date"}
    df = spark.createDataFrame([(1, json.dumps(message).encode())], "offset bigint, value binary")
    decoded = frames.decode(df, schema, transform_sources(transforms))
    row = frames.apply_transforms(decoded, transforms, schema).collect()[0]
    assert (row["n"], row["p"], row["t"]) == (None, None, None)
    assert sorted((p["column"], p["raw"]) for p in row["__problems"]) == [
        ("n", "not a number"),
        ("t", "not a date"),
    ]
