"""The one parser of ingestion transform expressions and its registry (pure, no Spark)."""

from __future__ import annotations

import pytest

from tables.domain.transform_expr import (
    FUNCTIONS,
    Call,
    Column,
    Literal,
    TransformExprError,
    canonical,
    columns_of,
    parse_expression,
    parse_transform,
    transform_config_problems,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1704067200000", Literal(1704067200000)),
        ("-1.5", Literal(-1.5)),
        ("1e3", Literal(1000.0)),
        ("'it''s'", Literal("it's")),
        ("true", Literal(True)),
        ("NULL", Literal(None)),
        ("a.b", Column("a.b")),
        ("`my col`", Column("my col")),
        ('"timestamp"', Column("timestamp")),
        ("now()", Call("now", ())),
        (
            "upper(concat(a, 'x', '-'))",
            Call("upper", (Call("concat", (Column("a"), Literal("x"), Literal("-"))),)),
        ),
    ],
)
def test_the_parser_reads_literals_columns_and_nested_calls(text, expected):
    assert parse_expression(text) == expected


@pytest.mark.parametrize("text", ["", "f(", "f(a,,b)", "f(a) g", "a b", "'open", "f(a))"])
def test_malformed_expressions_are_refused(text):
    with pytest.raises(TransformExprError):
        parse_expression(text)


def test_names_compare_like_pinots():
    assert canonical("To_Epoch_Days") == canonical("toEpochDays") == "toepochdays"
    for text in ("TO_EPOCH_DAYS(t)", "regexp_extract(s, 'x')", "JSONPATHSTRING(j, '$.a')"):
        parse_transform(text)  # no error
    assert FUNCTIONS["add"] is FUNCTIONS["plus"]


@pytest.mark.parametrize(
    ("text", "function", "reason"),
    [
        ("stDistance(stPoint(a, b), p)", "stDistance", "not supported"),
        ("lower(stGeomFromText(a))", "stGeomFromText", "not supported"),
        ("Groovy({a + b}, a, b)", "Groovy", "controller.disable.ingestion.groovy"),
        ("groovy ({x}, x)", "Groovy", "Groovy"),
        ("toEpochDaysBucket(m)", "toEpochDaysBucket", "takes 2 argument"),
        ("fromEpochDaysRounded(d, 2)", "fromEpochDaysRounded", "not supported"),
        ("substr(s, x)", "substr", "argument 2 of substr must be a whole number"),
        ("jsonPathString(j, path)", "jsonPathString", "must be a quoted string"),
        ("fromDateTime(s)", "fromDateTime", "takes 2 argument"),
    ],
)
def test_what_the_build_cannot_run_is_refused_naming_the_function(text, function, reason):
    with pytest.raises(TransformExprError, match=reason) as caught:
        parse_transform(text)
    assert caught.value.function == function


def test_sources_are_every_column_read_once_in_order():
    expr = parse_transform("concat(b, plus(a, b), `c d`)")
    assert columns_of(expr) == ["b", "a", "c d"]


def test_transform_config_problems_name_the_column_and_the_function():
    configs = [
        {"columnName": "ok", "transformFunction": "toEpochDays(ts)"},
        {"columnName": "geo", "transformFunction": "stDistance(p, p)"},
        {"columnName": "g", "transformFunction": "Groovy({a}, a)"},
        {"columnName": "gone", "transformFunction": "lower(a)"},
        {"columnName": 3},
    ]
    problems = transform_config_problems(configs, ["ok", "geo", "g"])
    assert len(problems) == 4
    assert "column 'geo'" in problems[0] and "stDistance" in problems[0]
    assert "column 'g'" in problems[1] and "Groovy" in problems[1]
    assert "column 'gone' is not a column of the schema" in problems[2]
    assert "entry #5" in problems[3]
    assert transform_config_problems(None) == []
    assert transform_config_problems(configs[:1]) == []
    assert transform_config_problems("x") == ["ingestionConfig.transformConfigs must be a list"]
