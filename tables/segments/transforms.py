"""Ingestion transforms and time formats, parsed before any Spark work is done.

Contract:
- `parse_transforms(configs, schema)` reads `ingestionConfig.transformConfigs` (a list of
  `{"columnName", "transformFunction"}`) and returns one `Transform` per entry, or raises
  `BuildError("unsupported transform function ...")` naming the first entry it cannot run. Supported
  functions: `fromDateTime(column, 'javaPattern')` (epoch millis of the parsed text), Pinot's
  epoch conversions of a column of epoch millis `toEpoch<Unit>(millis)` (truncated toward zero, as
  Java's `TimeUnit.toX`), `toEpoch<Unit>Rounded(millis, n)` (that, truncated to a multiple of n),
  `toEpoch<Unit>Bucket(millis, n)` (that, divided by n), and their inverses `fromEpoch<Unit>(x)`
  and `fromEpoch<Unit>Bucket(x, n)` (epoch millis of x, or of x * n, units), for the units
  Seconds, Minutes, Hours and Days; and a plain column reference (`otherColumn`, or back-quoted /
  double-quoted). Function names compare like Pinot's: case-insensitive, underscores ignored. The
  destination must be a schema column.
- `spark_datetime_pattern(pattern)` turns a Java/Joda pattern into a Spark one. The only letters
  that mean something else in Spark are rewritten: Joda's `Z` accepts a literal "Z" as well as
  "+0000" when parsing, so `Z` becomes `XX` (and `ZZ` -> `XXX`, `ZZZ` -> `VV`); Joda's `Y` (year of
  era) becomes `y`. Week-based letters (`x`, `w`, `e`, `c`) are refused: Spark cannot parse them.
- `parse_time_format(spec)` reads a dateTime field's `format` in both of Pinot's notations
  (`1:MILLISECONDS:EPOCH`, `1:SECONDS:SIMPLE_DATE_FORMAT:pattern`, `1:MILLISECONDS:TIMESTAMP`,
  `EPOCH|SECONDS|1`, `SIMPLE_DATE_FORMAT|pattern`, `TIMESTAMP`).
Pure Python: no Spark, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tables.domain.schema import FieldSpec, Schema
from tables.segments.errors import BuildError

__all__ = [
    "EPOCH",
    "FROM_DATE_TIME",
    "IDENTITY",
    "TimeFormat",
    "Transform",
    "parse_time_format",
    "parse_transforms",
    "spark_datetime_pattern",
    "transform_sources",
]

FROM_DATE_TIME = "fromDateTime"
IDENTITY = "column"
EPOCH = "epoch"  # the toEpoch*/fromEpoch* family: value * multiply / divide (see Transform)
_EPOCH_UNITS = {"seconds": 1_000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}

_TOKEN = re.compile(
    r"\s*(?:(?P<ident>[A-Za-z_$][\w$.]*)|`(?P<bq>[^`]+)`|\"(?P<dq>[^\"]+)\""
    r"|'(?P<str>(?:[^']|'')*)'|(?P<num>-?\d+(?:\.\d+)?)|(?P<punct>[(),]))"
)
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
    """`column` = `function(source[, pattern])`; `function` is FROM_DATE_TIME, EPOCH or IDENTITY.
    EPOCH: the source as a long, times `multiply`, divided by `divide` (truncated toward zero),
    then times `round_to` (a `Rounded` form divides by n units, then multiplies by n)."""

    column: str
    function: str
    source: str
    pattern: str | None = None  # the Spark pattern, for FROM_DATE_TIME
    multiply: int = 1
    divide: int = 1
    round_to: int = 1


@dataclass(frozen=True)
class TimeFormat:
    """A dateTime format: kind EPOCH (value * multiply // divide = millis), TIMESTAMP, or
    SIMPLE_DATE_FORMAT (`pattern` is the Spark pattern)."""

    kind: str
    multiply: int = 1
    divide: int = 1
    pattern: str | None = None


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot read {text[pos:]!r}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind in ("bq", "dq"):
            kind = "ident"
        elif kind == "str":
            value = value.replace("''", "'")
        tokens.append((kind, value))
        pos = match.end()
    return tokens


def _canonical(name: str) -> str:
    return name.replace("_", "").lower()


def _parse_one(column: str, expression: str, schema: Schema) -> Transform:
    def unsupported(reason: str) -> BuildError:
        return BuildError(
            f"unsupported transform function {expression!r} for column {column!r}: {reason} "
            "(supported: fromDateTime(column, 'pattern'), toEpoch<Unit>[Rounded|Bucket] and "
            "fromEpoch<Unit>[Bucket] for Seconds, Minutes, Hours and Days, and plain column "
            "references)"
        )

    try:
        tokens = _tokens(expression)
    except ValueError as exc:
        raise unsupported(str(exc)) from None
    destination = schema.field(column)
    if destination is None:
        raise unsupported("the destination is not a column of the schema")
    if len(tokens) == 1 and tokens[0][0] == "ident":
        return Transform(column, IDENTITY, tokens[0][1])
    if len(tokens) < 3 or tokens[0][0] != "ident" or tokens[1] != ("punct", "("):
        raise unsupported("not a function call or a column")
    name = tokens[0][1]
    if tokens[-1] != ("punct", ")"):
        raise unsupported("the call is not closed")
    args = tokens[2:-1]
    values = args[0::2]
    commas = args[1::2]
    if any(c != ("punct", ",") for c in commas) or any(k == "punct" for k, _ in values):
        raise unsupported("arguments must be columns or literals (no nested calls)")
    epoch = _epoch_transform(column, name, values)
    if isinstance(epoch, str):
        raise unsupported(epoch)
    if epoch is not None:
        return epoch
    if _canonical(name) != _canonical(FROM_DATE_TIME):
        raise unsupported(f"{name} is not implemented")
    if len(values) != 2 or values[0][0] != "ident" or values[1][0] != "str":
        raise unsupported("fromDateTime takes a column and a quoted pattern")
    if not destination.single_value:
        raise unsupported("fromDateTime cannot fill a multi-value column")
    return Transform(column, FROM_DATE_TIME, values[0][1], spark_datetime_pattern(values[1][1]))


def _epoch_transform(
    column: str, name: str, values: list[tuple[str, str]]
) -> Transform | str | None:
    """A toEpoch*/fromEpoch* call as a Transform, the reason it cannot run, or None when `name`
    is not of that family."""
    match = re.fullmatch(
        r"(to|from)epoch(seconds|minutes|hours|days)(rounded|bucket)?", _canonical(name)
    )
    if match is None:
        return None
    direction, unit, form = match.groups()
    if direction == "from" and form == "rounded":
        return f"{name} is not a Pinot function"
    wanted = 1 if form is None else 2
    if len(values) != wanted or values[0][0] != "ident":
        extra = " and a whole number" if wanted == 2 else ""
        return f"{name} takes a column{extra}"
    size = 1
    if wanted == 2:
        if values[1][0] != "num" or not values[1][1].isdigit() or int(values[1][1]) < 1:
            return f"{name}'s second argument must be a whole number of at least 1"
        size = int(values[1][1])
    factor = _EPOCH_UNITS[unit]
    source = values[0][1]
    if direction == "from":  # fromEpochX(x) = x units; fromEpochXBucket(x, n) = x * n units
        return Transform(column, EPOCH, source, multiply=factor * size)
    if form == "rounded":
        return Transform(column, EPOCH, source, divide=factor * size, round_to=size)
    return Transform(column, EPOCH, source, divide=factor * (size if form == "bucket" else 1))


def parse_transforms(
    configs: Iterable[Mapping[str, Any]] | None, schema: Schema
) -> list[Transform]:
    """Every transform of `configs`, in order; BuildError for the first one that cannot run."""
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
    return transforms


def transform_sources(transforms: Iterable[Transform]) -> list[str]:
    """The input fields the transforms read, in order, without repeats."""
    return list(dict.fromkeys(t.source for t in transforms))


def spark_datetime_pattern(pattern: str) -> str:
    """A Java/Joda date-time pattern rewritten for Spark's parser (see the module docstring)."""
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
            out.append({1: "XX", 2: "XXX"}.get(run, "VV"))
        elif char == "Y":
            out.append("y" * run)
        else:
            out.append(char * run)
        i += run
    return "".join(out)


def _epoch(unit: str, size: str, spec: FieldSpec) -> TimeFormat:
    factors = _UNIT_MS.get(unit.strip().upper())
    if factors is None or not size.strip().isdigit() or int(size) < 1:
        raise BuildError(f"time column {spec.name!r} has an unsupported format {spec.format!r}")
    return TimeFormat("EPOCH", factors[0] * int(size), factors[1])


def parse_time_format(spec: FieldSpec) -> TimeFormat:
    """The time format of a dateTime (or legacy time) field; BuildError when unsupported."""
    if spec.data_type == "TIMESTAMP":
        return TimeFormat("TIMESTAMP")
    fmt = (spec.format or "").strip()
    if "|" in fmt or ":" not in fmt:
        parts = fmt.split("|")
        kind = parts[0].strip().upper()
        if kind == "EPOCH":
            return _epoch(
                parts[1] if len(parts) > 1 else "MILLISECONDS",
                parts[2] if len(parts) > 2 else "1",
                spec,
            )
        if kind == "TIMESTAMP":
            return TimeFormat("TIMESTAMP")
        if kind == "SIMPLE_DATE_FORMAT" and len(parts) > 1 and parts[1]:
            return TimeFormat("SIMPLE_DATE_FORMAT", pattern=spark_datetime_pattern(parts[1]))
    else:
        parts = fmt.split(":", 3)
        kind = parts[2].strip().upper() if len(parts) > 2 else ""
        if kind == "EPOCH":
            return _epoch(parts[1], parts[0], spec)
        if kind == "TIMESTAMP":
            return TimeFormat("TIMESTAMP")
        if kind == "SIMPLE_DATE_FORMAT" and len(parts) == 4 and parts[3]:
            return TimeFormat("SIMPLE_DATE_FORMAT", pattern=spark_datetime_pattern(parts[3]))
    raise BuildError(f"time column {spec.name!r} has an unsupported format {spec.format!r}")
