"""`ingestionConfig.filterConfig` and `complexTypeConfig` as the one parser and table-config
validation see them (pure, no Spark)."""

from __future__ import annotations

import pytest

from tables.domain.table_config import TableConfigError, parse_table_config
from tables.domain.transform_expr import (
    FUNCTIONS,
    Call,
    Column,
    Literal,
    TransformExprError,
    complex_type_problems,
    filter_config_problems,
    parse_filter,
)
from tests.tables.domain.test_table_config import simple

WHERE = "ingestionConfig.filterConfig.filterFunction"


@pytest.mark.parametrize(
    "text",
    [
        "equals(country, 'US')",
        "not_equals(a, 1)",
        "greaterThan(price, 100)",
        "GREATER_THAN_OR_EQUAL(a, b)",
        "lessThan(toEpochDays(ts), 19000)",
        "lessThanOrEqual(a, 2.5)",
        "between(a, 1, 10)",
        "and(isNull(a), or(equals(b, 'x'), not(startsWith(c, 'tmp'))), isNotNull(d))",
        "true",
        "isBot",
    ],
)
def test_pinots_boolean_functions_and_every_family_as_arguments_are_filters(text):
    parse_filter(text)  # no error
    assert filter_config_problems({"filterFunction": text}) == []


def test_the_filter_reads_into_the_shared_ast():
    assert parse_filter("and(equals(a, 1), not(b))") == Call(
        "and", (Call("equals", (Column("a"), Literal(1))), Call("not", (Column("b"),)))
    )
    assert FUNCTIONS["notequals"].family == "comparison"


@pytest.mark.parametrize(
    ("text", "function", "reason"),
    [
        ("Groovy({timestamp < 1589007600000}, timestamp)", "Groovy", "controller.disable"),
        ("strcmp(a, 'x')", "strcmp", "not supported"),
        ("equals(a)", "equals", "takes 2 argument"),
        ("and(a)", "and", "takes 2 to 32 argument"),
        ("lower(a)", "lower", "does not return a boolean"),
        ("not(inIdSet(a, 'x'))", "inIdSet", "not supported"),
    ],
)
def test_a_filter_the_build_cannot_run_is_refused_naming_the_function(text, function, reason):
    with pytest.raises(TransformExprError, match=reason) as caught:
        parse_filter(text)
    assert caught.value.function == function
    (problem,) = filter_config_problems({"filterFunction": text})
    assert problem.startswith(f"{WHERE} ")
    assert f"(function {function})" in problem


def test_filter_config_shapes():
    assert filter_config_problems(None) == []
    assert filter_config_problems({}) == []
    assert filter_config_problems([]) == ["ingestionConfig.filterConfig must be a JSON object"]
    assert filter_config_problems({"filterFunction": 3}) == [f"{WHERE} must be a string"]


def test_complex_type_config_flattening_and_unnesting_are_accepted_renaming_refused():
    assert complex_type_problems(None) == []
    assert complex_type_problems({}) == []
    ok = {"delimiter": "_", "collectionNotUnnestedToJson": "ALL", "fieldsToUnnest": []}
    assert complex_type_problems(ok) == []
    assert complex_type_problems({"fieldsToUnnest": ["group.members", "items"]}) == []
    (problem,) = complex_type_problems({"fieldsToUnnest": ["items", ""]})
    assert (
        problem == "ingestionConfig.complexTypeConfig.fieldsToUnnest must be a list of field names"
    )
    problems = complex_type_problems(
        {"fieldsToUnnest": "x", "delimiter": "", "collectionNotUnnestedToJson": "SOME"}
    )
    assert len(problems) == 3
    assert "must be one of NONE, NON_PRIMITIVE, ALL, not 'SOME'" in problems[2]
    (renaming,) = complex_type_problems({"prefixesToRename": {"a.": ""}})
    assert renaming.startswith(
        "ingestionConfig.complexTypeConfig.prefixesToRename is not supported by the segment build"
    )


def test_table_config_writes_refuse_what_the_build_cannot_run_and_reads_do_not():
    data = simple()
    data["ingestionConfig"]["filterConfig"] = {"filterFunction": "Groovy({a > 1}, a)"}
    data["ingestionConfig"]["complexTypeConfig"] = {"prefixesToRename": {"items.": ""}}
    parse_table_config(data)  # read back from ZooKeeper: kept as written
    with pytest.raises(TableConfigError) as caught:
        parse_table_config(data, for_write=True)
    problems = caught.value.problems
    assert len(problems) == 2
    assert "filterConfig" in problems[0] and "Groovy" in problems[0]
    assert "prefixesToRename" in problems[1]
    data["ingestionConfig"]["filterConfig"] = {"filterFunction": "lessThan(a, 1)"}
    data["ingestionConfig"]["complexTypeConfig"] = {"delimiter": ".", "fieldsToUnnest": ["a"]}
    stored = parse_table_config(data, for_write=True).rest["ingestionConfig"]
    assert stored["filterConfig"] == {"filterFunction": "lessThan(a, 1)"}
