"""Pinot's ingestion transform functions as Spark column expressions (never per-row Python).

Contract: `compile_expression(expr, field)` turns an AST of `tables.domain.transform_expr` (already
checked against its registry) into a `Value` (`tables.segments.spark_values`): a Spark column,
its kind, and whether a null result for present inputs is legitimate (`may_be_null`: jsonPath of
a missing path, for example) rather than a row the transform rejects. `field(name)` gives the
raw text of an input field (as `frames.decode` keeps it: strings unquoted, numbers as written,
objects and arrays as JSON text).

Pinot's semantics (its scalar functions, `ArithmeticFunctions`, `StringFunctions`,
`DateTimeFunctions`, `DateTimeConvert`, `JsonFunctions`):
- Arguments are converted to the parameter's type as Pinot's `PinotDataType` does: text to a
  number by parsing; a multi-value input (a JSON array) given to a single-value parameter is its
  first element. A null argument makes the result null, except where Pinot's function accepts
  nulls (`toJsonMapStr`; the default-taking forms of `jsonPathString|Long|Double`).
- Math works in doubles (`plus`, `minus`, `times`, `divide`, `mod` as Java's `%`, `abs`, `ceil`,
  `floor`, `exp`, `ln`, `sqrt`; a zero divisor gives Infinity or NaN as Java does); `round(x, n)`
  is DateTimeFunctions' long `(x / n) * n`.
- Strings: `substr` is commons-lang `StringUtils.substring` (negative indexes count from the end;
  an end of -1 means the end), `concat(a, b[, separator])`, `split` by the whole separator,
  dropping empty pieces (`splitByWholeSeparator`), `regexpExtract(value, regexp[, group[,
  default]])` (the default, "" unless given, when nothing matches), `regexpReplace` replaces every
  match (Java's replacement syntax), `ltrim`/`rtrim` whitespace, `trim` as Java's `String.trim`.
- Date/time: epoch millis in and out; `toDateTime(millis, pattern[, zone])` prints with a Joda
  pattern; `dateTrunc(unit, value[, inputUnit[, zone[, outputUnit]]])`; `dateTimeConvert(value,
  inputFormat, outputFormat, 'n:UNIT')` (an EPOCH or TIMESTAMP output is the epoch value truncated
  to the granularity; a SIMPLE_DATE_FORMAT output is truncated field by field, then printed);
  `now()` is the build job's start time.
- JSON: `jsonFormat` prints its argument as JSON (a text that is not a JSON object, array, number
  or boolean is printed as a JSON string); the paths of `jsonPath*` and `jsonExtractScalar` take
  `$`, `.name`, `['name']`, `[n]` and `[*]` (Spark's `get_json_object`).
- Comparisons (`ComparisonFunctions` and Pinot's polymorphic comparison functions): two values
  that both read as numbers compare as doubles (`equals` / `notEquals` with Pinot's tolerance of
  1e-7); otherwise, unless one of them is a number, as text. `between(v, low, high)` is
  inclusive, on doubles. `isNull` / `isNotNull` accept nulls. `and`, `or`, `not` are Pinot's
  evaluator nodes: three-valued (a null operand gives null unless the result is decided).
  A value is a boolean as `PinotDataType` reads one: numbers are true when not 0, text when it is
  "true" (any case) or "1".
- Geospatial (`stPoint`, `toSphericalGeography`, `toGeometry`, `stAsText`): see
  `tables.segments.geo_functions` (Pinot's serialized geometry bytes, as hex text).
- `compile_filter(expr, field)`: whether a row is dropped by `filterConfig` (never null): only a
  true result drops it, as Pinot's FilterTransformer (null, false or any other value keep it).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tables.domain.transform_expr import Call, Expr, Literal
from tables.domain.transform_expr import Column as ColumnRef
from tables.segments.errors import BuildError
from tables.segments.geo_functions import geo_call
from tables.segments.spark_values import (
    ARRAY,
    BOOLEAN,
    DOUBLE,
    LONG,
    RAW,
    STRING,
    Field,
    Value,
    as_array,
    as_boolean,
    as_double,
    as_long,
    as_string,
    json_text,
    literal_value,
)
from tables.segments.transforms import (
    granularity_millis,
    parse_format_string,
    spark_datetime_pattern,
    spark_format_pattern,
)

__all__ = [
    "ARRAY",
    "RAW",
    "STRING",
    "Value",
    "as_array",
    "compile_expression",
    "compile_filter",
]

_MAX_TIMESTAMP_MS = 253_402_300_799_999
_UNIT_MS = {
    "MILLISECONDS": 1,
    "SECONDS": 1_000,
    "MINUTES": 60_000,
    "HOURS": 3_600_000,
    "DAYS": 86_400_000,
}
_TRUNC_UNITS = {
    "millisecond": "MILLISECOND",
    "second": "SECOND",
    "minute": "MINUTE",
    "hour": "HOUR",
    "day": "DAY",
    "week": "WEEK",
    "month": "MONTH",
    "quarter": "QUARTER",
    "year": "YEAR",
}


def _text(node: Expr) -> str:
    assert isinstance(node, Literal) and isinstance(node.value, str)  # the registry checked it
    return node.value


def _int(node: Expr) -> int:
    assert isinstance(node, Literal) and isinstance(node.value, int)
    return node.value


def _number(node: Expr) -> float:
    assert isinstance(node, Literal) and isinstance(node.value, int | float)
    return float(node.value)


# --- math ---------------------------------------------------------------------------------------


def _inf() -> Column:
    return F.lit(float("inf"))


def _nan() -> Column:
    return F.lit(float("nan"))


def _divide(a: Column, b: Column) -> Column:
    by_zero = F.when(a > 0, _inf()).when(a < 0, -_inf()).otherwise(_nan())
    return F.when(b == 0, by_zero).otherwise(F.try_divide(a, b))


def _long_div(a: Column, b: Column) -> Column:
    """Java's long division (truncated toward zero); null for a zero divisor."""
    return F.when(b != 0, F.call_function("div", a, b))


def _ln(a: Column) -> Column:
    return F.when(a == 0, -_inf()).when(a < 0, _nan()).otherwise(F.log(a))


_MATH2: dict[str, Callable[[Column, Column], Column]] = {
    "plus": lambda a, b: a + b,
    "add": lambda a, b: a + b,
    "minus": lambda a, b: a - b,
    "sub": lambda a, b: a - b,
    "times": lambda a, b: a * b,
    "mult": lambda a, b: a * b,
    "divide": _divide,
    "div": _divide,
    "mod": lambda a, b: F.when(b == 0, _nan()).otherwise(F.try_mod(a, b)),
}
_MATH1: dict[str, Callable[[Column], Column]] = {
    "abs": F.abs,
    "ceil": lambda a: F.ceil(a).cast("double"),
    "ceiling": lambda a: F.ceil(a).cast("double"),
    "floor": lambda a: F.floor(a).cast("double"),
    "exp": F.exp,
    "ln": _ln,
    "sqrt": F.sqrt,
}


# --- strings ------------------------------------------------------------------------------------


def _substr(text: Column, begin: int, end: int | None) -> Column:
    """StringUtils.substring: negative indexes count from the end, clamped to the text."""
    length = F.length(text)

    def position(index: int) -> Column:
        at = length + F.lit(index) if index < 0 else F.lit(index)
        return F.least(F.greatest(at, F.lit(0)), length)

    start = position(begin)
    stop = length if end is None or end == -1 else position(end)
    return F.when(stop > start, F.substring(text, start + F.lit(1), stop - start)).otherwise(
        F.when(text.isNotNull(), F.lit(""))
    )


def _split(text: Column, separator: str) -> Column:
    """StringUtils.splitByWholeSeparator: no empty pieces; a separator of "" splits on spaces."""
    pattern = r"\s+" if separator == "" else _java_quote(separator)
    pieces = F.split(text, pattern)
    return F.filter(pieces, lambda piece: piece != F.lit(""))


def _java_quote(text: str) -> str:
    return "\\Q" + text.replace("\\E", "\\E\\\\E\\Q") + "\\E"


def _regexp_extract(args: list[Value], nodes: tuple[Expr, ...]) -> Column:
    text = as_string(args[0])
    pattern = _text(nodes[1])
    group = _int(nodes[2]) if len(nodes) > 2 else 0
    default = as_string(args[3]) if len(nodes) > 3 else F.lit("")
    try:
        groups = re.compile(pattern).groups
    except re.error:  # Java-only syntax: Spark checks the group when the job runs
        groups = group
    if group > groups:  # Pinot: no such group, the default
        return F.when(text.isNotNull(), default)
    matched = F.regexp_extract(text, pattern, group)
    found = F.regexp_like(text, F.lit(pattern))
    return F.when(text.isNotNull(), F.when(found, matched).otherwise(default))


# --- date and time ------------------------------------------------------------------------------


def _timestamp(millis: Column) -> Column:
    in_range = F.abs(millis) <= F.lit(_MAX_TIMESTAMP_MS)
    return F.when(in_range, F.timestamp_millis(F.when(in_range, millis)))


def _to_date_time(millis: Column, pattern: str, zone: str | None) -> Column:
    moment = _timestamp(millis)
    if zone is not None:
        moment = F.from_utc_timestamp(moment, F.lit(zone))
    return F.date_format(moment, spark_format_pattern(pattern))


def _unit_ms(name: str, function: str) -> int:
    factor = _UNIT_MS.get(name)
    if factor is None:
        raise BuildError(f"{function}: time unit {name!r} is not supported by the build")
    return factor


def _date_trunc(args: list[Value], nodes: tuple[Expr, ...]) -> Column:
    unit = _TRUNC_UNITS.get(_text(nodes[0]).lower())
    if unit is None:
        raise BuildError(f"dateTrunc: unit {_text(nodes[0])!r} is not supported")
    input_unit = _text(nodes[2]) if len(nodes) > 2 else "MILLISECONDS"
    zone = _text(nodes[3]) if len(nodes) > 3 else "UTC"
    output_unit = _text(nodes[4]) if len(nodes) > 4 else input_unit
    in_ms, out_ms = _unit_ms(input_unit, "dateTrunc"), _unit_ms(output_unit, "dateTrunc")
    moment = _timestamp(F.try_multiply(as_long(args[1]), F.lit(in_ms)))
    if zone.upper() != "UTC":
        local = F.date_trunc(unit, F.from_utc_timestamp(moment, F.lit(zone)))
        truncated = F.to_utc_timestamp(local, F.lit(zone))
    else:
        truncated = F.date_trunc(unit, moment)
    return _long_div(F.unix_millis(truncated), F.lit(out_ms))


def _field_floor(moment: Column, unit: str, size: int) -> Column:
    """DateTimeConvert.truncateDateTime: the field of `unit` floored to a multiple of `size`."""
    millis = F.unix_millis(moment)
    if unit == "MILLISECONDS":
        within = F.pmod(millis, F.lit(1000))
        return millis - within + F.floor(within / size).cast("bigint") * size
    parent, field, step = {
        "SECONDS": ("MINUTE", F.second, 1_000),
        "MINUTES": ("HOUR", F.minute, 60_000),
        "HOURS": ("DAY", F.hour, 3_600_000),
        "DAYS": ("MONTH", lambda c: F.dayofmonth(c) - 1, 86_400_000),
    }[unit]
    base = F.unix_millis(F.date_trunc(parent, moment))
    return base + (F.floor(field(moment) / size).cast("bigint") * F.lit(size * step))


def _date_time_convert(args: list[Value], nodes: tuple[Expr, ...]) -> Value:
    source = parse_format_string(_text(nodes[1]), "dateTimeConvert input format")
    target = parse_format_string(_text(nodes[2]), "dateTimeConvert output format")
    granularity = _text(nodes[3])
    step = granularity_millis(granularity)
    if source.kind == "SIMPLE_DATE_FORMAT":
        millis = F.unix_millis(F.try_to_timestamp(as_string(args[0]), F.lit(source.pattern)))
    elif source.kind == "TIMESTAMP":
        text = as_string(args[0])
        stamp = F.unix_millis(text.try_cast("timestamp"))
        millis = F.coalesce(text.try_cast("bigint"), stamp)
    else:
        millis = _long_div(as_long(args[0]) * F.lit(source.multiply), F.lit(source.divide))
    if target.kind == "SIMPLE_DATE_FORMAT":
        size_text, _, unit = granularity.partition(":")
        floored = _field_floor(_timestamp(millis), unit.strip().upper(), int(size_text))
        assert target.raw_pattern is not None
        return Value(
            F.date_format(_timestamp(floored), spark_format_pattern(target.raw_pattern)), STRING
        )
    rounded = _long_div(millis, F.lit(step)) * F.lit(step)
    if target.kind == "TIMESTAMP":
        return Value(rounded, LONG)
    return Value(_long_div(rounded * F.lit(target.divide), F.lit(target.multiply)), LONG)


def _epoch_family(key: str, args: list[Value]) -> Column | None:
    """toEpoch<Unit>[Rounded|Bucket] and fromEpoch<Unit>[Bucket] (TimeUnit arithmetic)."""
    units = {"seconds": 1_000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}
    for unit, factor in units.items():
        if not key.endswith(unit) and unit not in key:
            continue
        value = as_long(args[0])
        if key == f"toepoch{unit}":
            return _long_div(value, F.lit(factor))
        if key == f"toepoch{unit}rounded":
            n = as_long(args[1])
            return _long_div(_long_div(value, F.lit(factor)), n) * n
        if key == f"toepoch{unit}bucket":
            return _long_div(_long_div(value, F.lit(factor)), as_long(args[1]))
        if key == f"fromepoch{unit}":
            return F.try_multiply(value, F.lit(factor))
        if key == f"fromepoch{unit}bucket":
            return F.try_multiply(F.try_multiply(value, as_long(args[1])), F.lit(factor))
    return None


# --- JSON ---------------------------------------------------------------------------------------

_JSON_SCALAR = r"^\s*(-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?|true|false)\s*$"


def _json_format(value: Value) -> Column:
    if value.kind == ARRAY:
        return F.to_json(value.column)
    if value.kind in (LONG, DOUBLE, BOOLEAN):
        return value.column.cast("string")
    text = value.column
    quoted = F.regexp_extract(F.to_json(F.array(text)), r"^\[(.*)\]$", 1)
    if value.kind == STRING:
        return quoted
    structured = (text.startswith("{") | text.startswith("[")) & F.get_json_object(
        text, "$"
    ).isNotNull()
    return F.when(structured | text.rlike(_JSON_SCALAR), text).otherwise(quoted)


def _json_path(value: Value, path: str) -> Column:
    return F.get_json_object(json_text(value), path)


def _json_path_array(value: Value, path: str) -> Column:
    found = _json_path(value, path)
    parsed = F.from_json(found, T.ArrayType(T.StringType()))
    return F.when(found.startswith("[") & parsed.isNotNull(), parsed).otherwise(
        F.when(found.isNotNull(), F.array(found))
    )


def _json_number(value: Value, path: str, cast: str) -> Column:
    found = _json_path(value, path)
    if cast == "bigint":
        return F.coalesce(found.try_cast("bigint"), found.try_cast("double").try_cast("bigint"))
    return found.try_cast("double")


_SCALAR_DEFAULTS = {  # jsonExtractScalar's defaults when none is given (JsonFunctions)
    "INT": (-(2**31), "bigint"),
    "LONG": (-(2**63), "bigint"),
    "TIMESTAMP": (-(2**63), "bigint"),
    "DOUBLE": (4.9e-324, "double"),  # Double.MIN_VALUE
    "BOOLEAN": (False, "boolean"),
    "STRING": (None, "string"),
}


def _json_extract_scalar(args: list[Value], nodes: tuple[Expr, ...]) -> Value:
    path, kind = _text(nodes[1]), _text(nodes[2]).upper()
    if kind not in _SCALAR_DEFAULTS:
        raise BuildError(f"jsonExtractScalar: result type {kind!r} is not supported")
    fallback, cast = _SCALAR_DEFAULTS[kind]
    given = literal_value(nodes[3]).column if len(nodes) > 3 else None
    default = given.try_cast(cast) if given is not None else F.lit(fallback).cast(cast)
    found = _json_path(args[0], path)
    if kind == "STRING":
        return Value(F.coalesce(found, default), STRING, True)
    if kind == "BOOLEAN":
        value = F.lower(found).try_cast("boolean")
        return Value(F.coalesce(value, default), BOOLEAN)
    if cast == "bigint":
        value = _json_number(args[0], path, "bigint")
        if kind == "INT":
            value = F.when(value.between(-(2**31), 2**31 - 1), value)
        return Value(F.coalesce(value, default), LONG)
    return Value(F.coalesce(found.try_cast("double"), default), DOUBLE)


def _to_json_map_str(value: Value) -> Column:
    text = json_text(value)
    is_object = (
        text.startswith("{")
        & F.from_json(text, T.MapType(T.StringType(), T.StringType())).isNotNull()
    )
    return F.when(text.isNull(), F.lit("null")).when(is_object, text)


# --- comparisons and logic ----------------------------------------------------------------------

_TOLERANCE = 1e-7  # ComparisonFunctions.DOUBLE_COMPARISON_TOLERANCE
_COMPARE: dict[str, Callable[[Column, Column], Column]] = {
    "greaterthan": lambda a, b: a > b,
    "greaterthanorequal": lambda a, b: a >= b,
    "lessthan": lambda a, b: a < b,
    "lessthanorequal": lambda a, b: a <= b,
    "equals": lambda a, b: a == b,
    "notequals": lambda a, b: a != b,
}
_NUMBER_KINDS = (LONG, DOUBLE, BOOLEAN)


def _compare(key: str, a: Value, b: Value) -> Column:
    da, db = as_double(a), as_double(b)
    if key == "equals":
        numeric = F.abs(da - db) < F.lit(_TOLERANCE)
    elif key == "notequals":
        numeric = F.abs(da - db) >= F.lit(_TOLERANCE)
    else:
        numeric = _COMPARE[key](da, db)
    if a.kind in _NUMBER_KINDS or b.kind in _NUMBER_KINDS:
        return numeric
    textual = _COMPARE[key](as_string(a), as_string(b))
    return F.when(da.isNotNull() & db.isNotNull(), numeric).otherwise(textual)


def _logic_call(key: str, args: list[Value]) -> Value | None:
    """The calls that are not strict in their nulls: and, or, isNull, isNotNull."""
    if key in ("and", "or"):
        operands = [as_boolean(a) for a in args]
        column = operands[0]
        for other in operands[1:]:
            column = (column & other) if key == "and" else (column | other)
        return Value(column, BOOLEAN, any(a.may_be_null for a in args))
    if key == "isnull":
        return Value(args[0].column.isNull(), BOOLEAN)
    if key == "isnotnull":
        return Value(args[0].column.isNotNull(), BOOLEAN)
    return None


def _comparison_call(key: str, args: list[Value]) -> Value | None:
    if key in _COMPARE:
        return Value(_compare(key, args[0], args[1]), BOOLEAN)
    if key == "between":
        value = as_double(args[0])
        return Value((value >= as_double(args[1])) & (value <= as_double(args[2])), BOOLEAN)
    if key == "not":
        return Value(~as_boolean(args[0]), BOOLEAN)
    return None


# --- the compiler -------------------------------------------------------------------------------


def compile_filter(expr: Expr, field: Field) -> Column:
    """Whether `filterConfig`'s function drops the row (see the module docstring)."""
    value = compile_expression(expr, field)
    if value.kind == BOOLEAN:
        dropped = value.column
    elif value.kind == RAW:  # a bare field: a JSON true
        dropped = F.lower(F.trim(value.column)) == F.lit("true")
    else:
        dropped = F.lit(False)
    return F.coalesce(dropped, F.lit(False))


def compile_expression(expr: Expr, field: Field) -> Value:
    """`expr` as a Spark column (see the module docstring); BuildError for a literal the build
    cannot use (an unknown time unit, for example)."""
    if isinstance(expr, Literal):
        return literal_value(expr)
    if isinstance(expr, ColumnRef):
        return Value(field(expr.name), RAW)
    return _call(expr, field)


def _strict(value: Value, args: list[Value]) -> Value:
    """Null in, null out; a legitimately null argument makes the result legitimately null."""
    present = [a.column.isNotNull() for a in args if not a.constant]
    column = value.column
    if present:
        condition = present[0]
        for other in present[1:]:
            condition = condition & other
        column = F.when(condition, column)
    return Value(column, value.kind, value.may_be_null or any(a.may_be_null for a in args))


def _call(call: Call, field: Field) -> Value:
    key, nodes = call.key, call.args
    args = [compile_expression(node, field) for node in nodes]
    logic = _logic_call(key, args)
    if logic is not None:
        return logic
    nullable = {"tojsonmapstr", "jsonpathstring", "jsonpathlong", "jsonpathdouble"}
    if key not in nullable or (len(nodes) < 3 and key != "tojsonmapstr"):
        return _strict(_strict_call(key, args, nodes), args)
    if key == "tojsonmapstr":
        return Value(_to_json_map_str(args[0]), STRING)
    path = _text(nodes[1])
    if key == "jsonpathstring":
        return Value(F.coalesce(_json_path(args[0], path), as_string(args[2])), STRING, True)
    cast = "bigint" if key == "jsonpathlong" else "double"
    default = F.lit(_int(nodes[2]) if cast == "bigint" else _number(nodes[2])).cast(cast)
    return Value(
        F.coalesce(_json_number(args[0], path, cast), default), LONG if cast == "bigint" else DOUBLE
    )


def _strict_call(key: str, args: list[Value], nodes: tuple[Expr, ...]) -> Value:
    if key in _MATH2:
        return Value(_MATH2[key](as_double(args[0]), as_double(args[1])), DOUBLE)
    if key in _MATH1:
        return Value(_MATH1[key](as_double(args[0])), DOUBLE)
    comparison = _comparison_call(key, args)
    if comparison is not None:
        return comparison
    if key == "round":
        n = as_long(args[1])
        return Value(_long_div(as_long(args[0]), n) * n, LONG)
    string = _string_call(key, args, nodes)
    if string is not None:
        return string
    epoch = _epoch_family(key, args)
    if epoch is not None:
        return Value(epoch, LONG)
    geo = geo_call(key, args)  # stPoint, toSphericalGeography, toGeometry, stAsText
    if geo is not None:
        return geo
    return _time_or_json_call(key, args, nodes)


def _string_call(key: str, args: list[Value], nodes: tuple[Expr, ...]) -> Value | None:
    simple: dict[str, Callable[[Column], Column]] = {
        "lower": F.lower,
        "upper": F.upper,
        "trim": lambda c: F.regexp_replace(c, r"^[\x00-\x20]+|[\x00-\x20]+$", ""),
        "ltrim": lambda c: F.regexp_replace(c, r"^\s+", ""),
        "rtrim": lambda c: F.regexp_replace(c, r"\s+$", ""),
    }
    if key in simple:
        return Value(simple[key](as_string(args[0])), STRING)
    if key == "concat":
        separator = [as_string(args[2])] if len(args) > 2 else []
        return Value(F.concat(as_string(args[0]), *separator, as_string(args[1])), STRING)
    if key == "substr":
        end = _int(nodes[2]) if len(nodes) > 2 else None
        return Value(_substr(as_string(args[0]), _int(nodes[1]), end), STRING)
    if key == "replace":
        text, find, by = (as_string(a) for a in args)
        return Value(F.when(find == "", text).otherwise(F.replace(text, find, by)), STRING)
    if key == "regexpextract":
        return Value(_regexp_extract(args, nodes), STRING, True)
    if key == "regexpreplace":
        pattern = F.lit(_text(nodes[1]))
        return Value(F.regexp_replace(as_string(args[0]), pattern, as_string(args[2])), STRING)
    if key == "split":
        return Value(_split(as_string(args[0]), _text(nodes[1])), ARRAY)
    if key == "startswith":
        return Value(F.startswith(as_string(args[0]), as_string(args[1])), BOOLEAN)
    return None


def _time_or_json_call(key: str, args: list[Value], nodes: tuple[Expr, ...]) -> Value:
    if key == "fromdatetime":
        pattern = spark_datetime_pattern(_text(nodes[1]))
        parsed = F.try_to_timestamp(as_string(args[0]), F.lit(pattern))
        return Value(F.unix_millis(parsed), LONG)
    if key == "todatetime":
        zone = _text(nodes[2]) if len(nodes) > 2 else None
        return Value(_to_date_time(as_long(args[0]), _text(nodes[1]), zone), STRING)
    if key == "datetrunc":
        return Value(_date_trunc(args, nodes), LONG)
    if key == "datetimeconvert":
        return _date_time_convert(args, nodes)
    if key == "now":
        return Value(F.unix_millis(F.current_timestamp()), LONG)
    if key == "jsonformat":
        return Value(_json_format(args[0]), STRING)
    if key in ("jsonpath", "jsonpathstring"):
        return Value(_json_path(args[0], _text(nodes[1])), STRING, True)
    if key == "jsonpathlong":  # JsonFunctions: Long.MIN_VALUE when the path is missing
        found = _json_number(args[0], _text(nodes[1]), "bigint")
        return Value(F.coalesce(found, F.lit(-(2**63)).cast("bigint")), LONG)
    if key == "jsonpathdouble":
        found = _json_number(args[0], _text(nodes[1]), "double")
        return Value(F.coalesce(found, _nan()), DOUBLE)
    if key == "jsonpatharray":
        return Value(_json_path_array(args[0], _text(nodes[1])), ARRAY, True)
    if key == "jsonextractscalar":
        return _json_extract_scalar(args, nodes)
    raise BuildError(f"transform function {key} has no Spark implementation")
