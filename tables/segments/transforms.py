"""Ingestion transforms and time formats, parsed before any Spark work is done.

Contract:
- `parse_transforms(configs, schema)` reads `ingestionConfig.transformConfigs` (a list of
  `{"columnName", "transformFunction"}`) and returns one `Transform` per entry, or raises
  `BuildError("unsupported transform function ...")` naming the first entry it cannot run. The
  expression is read by the one parser shared with table-config validation
  (`tables.domain.transform_expr`: literals, column references, nested calls of the functions in
  its registry; names compare like Pinot's, case-insensitive, underscores ignored); Spark runs it
  through `tables.segments.transform_functions`. The destination must be a schema column.
  Then, as Pinot's ExpressionTransformer, one `Transform` per schema field with a
  `transformFunction` (`FieldSpec.transform_function`, Pinot's older form) whose column has no
  entry in `configs` (the table's entry wins), in schema order; the same BuildError when one
  cannot run.
- `Transform.sources` are the input fields it reads, `Transform.patterns` the Spark date-time
  patterns it parses text with (checked against Spark before a build, see `builder._plan`).
- `parse_filter_config(config)` reads `ingestionConfig.filterConfig` into a `RowFilter` (None
  without a `filterFunction`), by the same parser (`transform_expr.parse_filter`); BuildError
  ("unsupported filter function ...") when the build cannot run it.
- `parse_complex_type_config(config)` reads `ingestionConfig.complexTypeConfig` into a
  `ComplexTypes` (None when absent); BuildError for what the build cannot honour
  (`transform_expr.complex_type_problems`: `prefixesToRename`, for one).
- `spark_datetime_pattern(pattern)` turns a Java/Joda pattern into a Spark one for parsing. The
  only letters that mean something else in Spark are rewritten: Joda's `Z` accepts a literal "Z"
  as well as "+0000" when parsing, so `Z` becomes `XX` (and `ZZ` -> `XXX`, `ZZZ` -> `VV`); Joda's
  `Y` (year of era) becomes `y`. Week-based letters (`x`, `w`, `e`, `c`) are refused: Spark cannot
  parse them. `spark_format_pattern(pattern)` is the same for printing (`Z` -> `xx`, which prints
  "+0000" as Joda does, `ZZ` -> `xxx`).
- `parse_time_format(spec)` reads a dateTime field's `format` in both of Pinot's notations
  (`1:MILLISECONDS:EPOCH`, `1:SECONDS:SIMPLE_DATE_FORMAT:pattern`, `1:MILLISECONDS:TIMESTAMP`,
  `EPOCH|SECONDS|1`, `SIMPLE_DATE_FORMAT|pattern`, `TIMESTAMP`); `parse_format_string(text)` reads
  such a format on its own (dateTimeConvert's arguments).
Pure Python: no Spark, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tables.domain.schema import FieldSpec, Schema
from tables.domain.transform_expr import (
    Call,
    Column,
    Expr,
    Literal,
    TransformExprError,
    columns_of,
    complex_type_problems,
    parse_filter,
    parse_transform,
    walk,
)
from tables.segments.errors import BuildError

__all__ = [
    "FROM_DATE_TIME",
    "IDENTITY",
    "LITERAL",
    "ComplexTypes",
    "RowFilter",
    "TimeFormat",
    "Transform",
    "granularity_millis",
    "parse_complex_type_config",
    "parse_filter_config",
    "parse_format_string",
    "parse_time_format",
    "parse_transforms",
    "spark_datetime_pattern",
    "spark_format_pattern",
    "transform_sources",
]

FROM_DATE_TIME = "fromdatetime"  # canonical names of the top-level call
IDENTITY = "column"
LITERAL = "literal"

_UNSUPPORTED_LETTERS = frozenset("xwec")
_UNIT_MS: dict[str, tuple[int, int]] = {  # unit -> (multiply, divide) to get milliseconds
    "NANOSECONDS": (1, 1_000_000),
    "MICROSECONDS": (1, 1_000),
    "MILLISECONDS": (1, 1),
    "SECONDS": (1_000, 1),
    "MINUTES": (60_000, 1),
    "HOURS": (3_600_000, 1),
    "DAYS": (86_400_000, 1),
}


@dataclass(frozen=True)
class Transform:
    """`column` = `expr`. `function`: the canonical name of the top-level call, or IDENTITY (a
    plain column) or LITERAL; `source`: the first input field (None for a literal);
    `pattern`: the Spark pattern of a top-level fromDateTime."""

    column: str
    expression: str
    expr: Expr
    sources: tuple[str, ...]
    patterns: tuple[str, ...] = ()
    function: str = IDENTITY
    source: str | None = None
    pattern: str | None = None


@dataclass(frozen=True)
class TimeFormat:
    """A dateTime format: kind EPOCH (value * multiply // divide = millis), TIMESTAMP, or
    SIMPLE_DATE_FORMAT (`pattern` is the Spark parsing pattern, `raw_pattern` Pinot's)."""

    kind: str
    multiply: int = 1
    divide: int = 1
    pattern: str | None = None
    raw_pattern: str | None = None


def _parse_patterns(expr: Expr) -> tuple[str, ...]:
    """The Spark parsing patterns of every fromDateTime in `expr` (BuildError when refused)."""
    patterns: list[str] = []
    for node in walk(expr):
        if isinstance(node, Call) and node.key == FROM_DATE_TIME:
            pattern = node.args[1]
            assert isinstance(pattern, Literal) and isinstance(pattern.value, str)
            patterns.append(spark_datetime_pattern(pattern.value))
        elif isinstance(node, Call) and node.key == "datetimeconvert":
            fmt = node.args[1]
            assert isinstance(fmt, Literal) and isinstance(fmt.value, str)
            parsed = parse_format_string(fmt.value, "dateTimeConvert input format")
            if parsed.pattern:
                patterns.append(parsed.pattern)
    return tuple(dict.fromkeys(patterns))


def _parse_one(column: str, expression: str, schema: Schema) -> Transform:
    def unsupported(reason: str) -> BuildError:
        return BuildError(
            f"unsupported transform function {expression!r} for column {column!r}: {reason}"
        )

    try:
        expr = parse_transform(expression)
    except TransformExprError as exc:
        raise unsupported(str(exc)) from None
    if schema.field(column) is None:
        raise unsupported("the destination is not a column of the schema")
    try:
        patterns = _parse_patterns(expr)
    except BuildError as exc:
        raise unsupported(str(exc)) from None
    sources = tuple(columns_of(expr))
    first = sources[0] if sources else None
    if isinstance(expr, Column):
        return Transform(column, expression, expr, sources, patterns, IDENTITY, first)
    if isinstance(expr, Literal):
        return Transform(column, expression, expr, sources, patterns, LITERAL, None)
    pattern = patterns[0] if expr.key == FROM_DATE_TIME else None
    return Transform(column, expression, expr, sources, patterns, expr.key, first, pattern)


def parse_transforms(
    configs: Iterable[Mapping[str, Any]] | None, schema: Schema
) -> list[Transform]:
    """Every transform of `configs`, in order, then the schema's own (see the module docstring);
    BuildError for the first one that cannot run."""
    transforms: list[Transform] = []
    for index, entry in enumerate(configs or [], start=1):
        column = entry.get("columnName") if isinstance(entry, Mapping) else None
        expression = entry.get("transformFunction") if isinstance(entry, Mapping) else None
        if not isinstance(column, str) or not isinstance(expression, str):
            raise BuildError(
                f"unsupported transform function in transformConfigs entry #{index}: it needs "
                "string 'columnName' and 'transformFunction'"
            )
        transforms.append(_parse_one(column, expression.strip(), schema))
    configured = {t.column for t in transforms}
    for spec in schema.fields:
        if spec.transform_function is not None and spec.name not in configured:
            transforms.append(_parse_one(spec.name, spec.transform_function.strip(), schema))
    return transforms


@dataclass(frozen=True)
class RowFilter:
    """`ingestionConfig.filterConfig`: rows for which `expr` is true are dropped."""

    expression: str
    expr: Expr
    sources: tuple[str, ...]
    patterns: tuple[str, ...] = ()


def parse_filter_config(config: object) -> RowFilter | None:
    """The table's row filter, or None; BuildError when the build cannot run it."""
    if config is None:
        return None
    text = config.get("filterFunction") if isinstance(config, Mapping) else config
    if text is None:
        return None
    if not isinstance(text, str):
        raise BuildError("unsupported filter function: filterConfig.filterFunction is not a text")
    try:
        expr = parse_filter(text)
        patterns = _parse_patterns(expr)
    except (TransformExprError, BuildError) as exc:
        raise BuildError(f"unsupported filter function {text.strip()!r}: {exc}") from None
    return RowFilter(text.strip(), expr, tuple(columns_of(expr)), patterns)


@dataclass(frozen=True)
class ComplexTypes:
    """`ingestionConfig.complexTypeConfig`, as the build honours it: nested objects are read
    through `parent<delimiter>child` column names; `to_json` is collectionNotUnnestedToJson."""

    delimiter: str = "."
    to_json: str = "NON_PRIMITIVE"


def parse_complex_type_config(config: object) -> ComplexTypes | None:
    """The table's complex-type handling, or None; BuildError for what the build cannot do."""
    if config is None:
        return None
    problems = complex_type_problems(config)
    if problems:
        raise BuildError(f"unsupported complexTypeConfig: {'; '.join(problems)}")
    assert isinstance(config, Mapping)  # complex_type_problems refuses anything else
    return ComplexTypes(
        config.get("delimiter") or ".", config.get("collectionNotUnnestedToJson") or "NON_PRIMITIVE"
    )


def transform_sources(transforms: Iterable[Transform]) -> list[str]:
    """The input fields the transforms read, in order, without repeats."""
    return list(dict.fromkeys(s for t in transforms for s in t.sources))


def _rewrite_pattern(pattern: str, zones: dict[int, str], default_zone: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "'":  # quoted literal, '' inside is a quote: same syntax in Spark
            end = i + 1
            while end < len(pattern):
                if pattern[end] == "'":
                    if end + 1 < len(pattern) and pattern[end + 1] == "'":
                        end += 2
                        continue
                    break
                end += 1
            out.append(pattern[i : end + 1])
            i = end + 1
            continue
        run = 1
        while i + run < len(pattern) and pattern[i + run] == char:
            run += 1
        if char in _UNSUPPORTED_LETTERS:
            raise BuildError(
                f"unsupported transform function: date-time pattern {pattern!r} uses the "
                f"week-based letter {char!r}, which Spark cannot parse"
            )
        if char == "Z":
            out.append(zones.get(run, default_zone))
        elif char == "Y":
            out.append("y" * run)
        else:
            out.append(char * run)
        i += run
    return "".join(out)


def spark_datetime_pattern(pattern: str) -> str:
    """A Java/Joda date-time pattern rewritten for Spark's parser (see the module docstring)."""
    return _rewrite_pattern(pattern, {1: "XX", 2: "XXX"}, "VV")


def spark_format_pattern(pattern: str) -> str:
    """A Java/Joda date-time pattern rewritten for Spark's printer (see the module docstring)."""
    return _rewrite_pattern(pattern, {1: "xx", 2: "xxx"}, "VV")


def _epoch(unit: str, size: str, what: str) -> TimeFormat:
    factors = _UNIT_MS.get(unit.strip().upper())
    if factors is None or not size.strip().isdigit() or int(size) < 1:
        raise BuildError(f"{what} is unsupported")
    return TimeFormat("EPOCH", factors[0] * int(size), factors[1])


def _simple_date_format(pattern: str, what: str) -> TimeFormat:
    if "tz(" in pattern.replace(" ", ""):
        raise BuildError(f"{what} is unsupported (a time zone in the format)")
    return TimeFormat(
        "SIMPLE_DATE_FORMAT", pattern=spark_datetime_pattern(pattern), raw_pattern=pattern
    )


def parse_format_string(text: str, what: str = "the format") -> TimeFormat:
    """A dateTime format in either of Pinot's notations; BuildError naming `what` otherwise."""
    fmt = (text or "").strip()
    what = f"{what} {text!r}"
    if "|" in fmt or ":" not in fmt:
        parts = fmt.split("|")
        kind = parts[0].strip().upper()
        if kind == "EPOCH":
            return _epoch(
                parts[1] if len(parts) > 1 else "MILLISECONDS",
                parts[2] if len(parts) > 2 else "1",
                what,
            )
        if kind == "TIMESTAMP":
            return TimeFormat("TIMESTAMP")
        if kind == "SIMPLE_DATE_FORMAT" and len(parts) > 1 and parts[1]:
            return _simple_date_format(parts[1], what)
    else:
        parts = fmt.split(":", 3)
        kind = parts[2].strip().upper() if len(parts) > 2 else ""
        if kind == "EPOCH":
            return _epoch(parts[1], parts[0], what)
        if kind == "TIMESTAMP":
            return TimeFormat("TIMESTAMP")
        if kind == "SIMPLE_DATE_FORMAT" and len(parts) == 4 and parts[3]:
            return _simple_date_format(parts[3], what)
    raise BuildError(f"{what} is unsupported")


def parse_time_format(spec: FieldSpec) -> TimeFormat:
    """The time format of a dateTime (or legacy time) field; BuildError when unsupported."""
    if spec.data_type == "TIMESTAMP":
        return TimeFormat("TIMESTAMP")
    try:
        return parse_format_string(spec.format or "")
    except BuildError:
        raise BuildError(
            f"time column {spec.name!r} has an unsupported format {spec.format!r}"
        ) from None


def granularity_millis(text: str) -> int:
    """`n:UNIT` (dateTimeConvert's granularity) in milliseconds; BuildError otherwise."""
    size, _, unit = (text or "").partition(":")
    factors = _UNIT_MS.get(unit.strip().upper())
    if factors is None or factors[1] != 1 or not size.strip().isdigit() or int(size) < 1:
        raise BuildError(f"granularity {text!r} is unsupported")
    return int(size) * factors[0]
