"""Pinot's default null values: what a column holds where a row has no value (pure, stdlib only).

Facts from Apache Pinot (`pinot-spi/.../data/FieldSpec.java`, `NullValueTransformer.java`,
`TimeUtils.java`, `BooleanUtils.java`, `TimestampUtils.java`):
- A field's default null value is its schema `defaultNullValue` when given, converted to the
  column's type (`FieldSpec.getDefaultNullValue`: the value's text, then `DataType.convert`),
  else the type default, which depends on the field kind:
  dimension / time / dateTime: INT `Integer.MIN_VALUE`, LONG `Long.MIN_VALUE`, FLOAT and DOUBLE
  negative infinity, BOOLEAN 0 (false), TIMESTAMP 0 (the epoch), STRING and JSON `"null"`, BYTES
  empty, BIG_DECIMAL 0; metric: INT, LONG, FLOAT, DOUBLE, BIG_DECIMAL 0, STRING `"null"`, BYTES
  empty. Pinot has no type default for MAP / LIST / STRUCT nor for a BOOLEAN, TIMESTAMP or JSON
  metric (`IllegalStateException`): `type_default` gives None for them (no default: they stay
  null here).
- `DataType.convert(text)`: INT/LONG `Integer.valueOf`/`Long.valueOf` (optional sign, digits, in
  range), FLOAT/DOUBLE `Float.valueOf`/`Double.valueOf` (surrounding blanks, `NaN`, `Infinity`,
  exponents, an `f`/`d` suffix; a float too large is infinity), BIG_DECIMAL `new BigDecimal`,
  BOOLEAN `BooleanUtils.toInt` (`true` in any case or `1` is true, ANY other text false), TIMESTAMP
  `TimestampUtils.toMillisSinceEpoch` (`yyyy-mm-dd hh:mm:ss[.f...]`, epoch millis, ISO-8601),
  STRING/JSON the text itself, BYTES hex (`BytesUtils.toBytes`). A text that does not convert
  makes Pinot refuse the schema (`Cannot convert value`): `default_value_problems` names it.
- The value's text is Java's `toString` of the JSON value: a JSON `true` is `"true"`, a number its
  digits (so `0` for a DOUBLE column is 0.0, `1.5` for an INT column is refused).
- The time column (the table's `timeColumnName`) is special (`NullValueTransformer`): its
  default is used only when it lies within `[VALID_MIN_TIME_MS, VALID_MAX_TIME_MS]` (1971-01-01
  to 2071-01-01 UTC, both included) read in the column's format; else the time "now" is
  (`tables.segments.null_values` uses the segment's creation time, for determinism).
- Null handling (`nullable_columns`): with the schema's `enableColumnBasedNullHandling` (Pinot
  1.1+) a column is nullable unless its field spec says `"notNull": true`; otherwise every column
  is nullable exactly when the table's `tableIndexConfig.nullHandlingEnabled` is true. Pinot then
  records, beside the default it stores, which documents were null (the null value vector).

Values are given in the types a segment's Parquet file holds (`tables.segments.data_file`): int,
float, `Decimal`, bool, TIMESTAMP as epoch millis (int), str, bytes.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any, Protocol


# Structural types of `tables.domain.schema`'s FieldSpec and Schema (that module imports this one).
class FieldSpec(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def data_type(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def default_null_value(self) -> object | None: ...


class Schema(Protocol):
    @property
    def fields(self) -> tuple[FieldSpec, ...]: ...
    @property
    def raw(self) -> dict[str, Any]: ...
    def column_names(self) -> tuple[str, ...]: ...


__all__ = [
    "VALID_MAX_TIME_MS",
    "VALID_MIN_TIME_MS",
    "NullValueError",
    "convert_default",
    "default_null_value",
    "default_value_problems",
    "java_text",
    "nullable_columns",
    "time_in_valid_range",
    "type_default",
]

#: Pinot's `TimeUtils.VALID_MIN_TIME_MILLIS` / `VALID_MAX_TIME_MILLIS` (1971 and 2071, UTC).
VALID_MIN_TIME_MS = 31_536_000_000
VALID_MAX_TIME_MS = 3_187_296_000_000

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]

_DIMENSION: dict[str, Any] = {
    "INT": _INT_MIN,
    "LONG": _LONG_MIN,
    "FLOAT": -math.inf,
    "DOUBLE": -math.inf,
    "BOOLEAN": False,
    "TIMESTAMP": 0,
    "STRING": "null",
    "JSON": "null",
    "BYTES": b"",
    "BIG_DECIMAL": Decimal(0),
}
_METRIC: dict[str, Any] = {
    "INT": 0,
    "LONG": 0,
    "FLOAT": 0.0,
    "DOUBLE": 0.0,
    "BIG_DECIMAL": Decimal(0),
    "STRING": "null",
    "BYTES": b"",
}
#: The column types a segment stores BIG_DECIMAL in: decimal(38, 18) (`tables.segments.frames`).
BIG_DECIMAL_DIGITS, BIG_DECIMAL_SCALE = 38, 18

_INTEGRAL = re.compile(r"[+-]?[0-9]+")
_JAVA_FLOAT = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_BIG_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")
_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ].*)?")


class NullValueError(ValueError):
    """A `defaultNullValue` that does not convert to its column's type."""


def type_default(data_type: str, kind: str) -> Any:
    """Pinot's default null value of a type for a field kind (`FieldKind`: DIMENSION, METRIC,
    DATE_TIME, TIME); None where Pinot has none."""
    table = _METRIC if str(kind) == "METRIC" else _DIMENSION
    return table.get(data_type)


def java_text(value: object) -> str:
    """The text Pinot converts: Java's `toString` of the JSON value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, int | str):
        return str(value)
    raise NullValueError(f"{json_kind(value)} is not a single value")


def _java_double(value: float) -> str:
    """Java's `Double.toString`: plain between 1e-3 and 1e7, else `d.dddE<n>`."""
    if not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def json_kind(value: object) -> str:
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def _integral(text: str, low: int, high: int, name: str) -> int:
    if not _INTEGRAL.fullmatch(text) or not low <= int(text) <= high:
        raise NullValueError(f"'{text}' is not an {name} value")
    return int(text)


def _floating(text: str, single: bool) -> float:
    trimmed = text.strip()
    if not _JAVA_FLOAT.fullmatch(trimmed):
        raise NullValueError(f"'{text}' is not a {'FLOAT' if single else 'DOUBLE'} value")
    body = trimmed.rstrip("fFdD") if "Infinity" not in trimmed else trimmed
    value = float(body.replace("Infinity", "inf"))
    if single and math.isfinite(value):
        if abs(value) > _FLOAT32_MAX:
            return math.copysign(math.inf, value)
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    return value


def _big_decimal(text: str) -> Decimal:
    if not _BIG_DECIMAL.fullmatch(text):
        raise NullValueError(f"'{text}' is not a BIG_DECIMAL value")
    try:
        with localcontext() as context:
            context.prec = 2 * BIG_DECIMAL_DIGITS
            step = Decimal(1).scaleb(-BIG_DECIMAL_SCALE)
            value: Decimal | None = Decimal(text).quantize(step, rounding=ROUND_HALF_UP)
    except InvalidOperation:
        value = None
    if value is None or len(value.as_tuple().digits) > BIG_DECIMAL_DIGITS:
        raise NullValueError(
            f"'{text}' does not fit the segment's decimal({BIG_DECIMAL_DIGITS},"
            f"{BIG_DECIMAL_SCALE}) BIG_DECIMAL column"
        )
    return value


def _timestamp(text: str) -> int:
    """`TimestampUtils.toMillisSinceEpoch` (a time without an offset is UTC)."""
    if _INTEGRAL.fullmatch(text):
        return _integral(text, _LONG_MIN, _LONG_MAX, "epoch millis")
    if _DATE_TIME.fullmatch(text):
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            when = None
        if when is not None:
            when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
            return (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
    raise NullValueError(f"'{text}' is not a TIMESTAMP value")


def convert_default(text: str, data_type: str) -> Any:
    """Pinot's `DataType.convert(text)` in the segment's types; NullValueError when it fails."""
    if data_type == "INT":
        return _integral(text, _INT_MIN, _INT_MAX, "INT")
    if data_type == "LONG":
        return _integral(text, _LONG_MIN, _LONG_MAX, "LONG")
    if data_type in ("FLOAT", "DOUBLE"):
        return _floating(text, data_type == "FLOAT")
    if data_type == "BIG_DECIMAL":
        return _big_decimal(text)
    if data_type == "BOOLEAN":
        return text.lower() == "true" or text == "1"
    if data_type == "TIMESTAMP":
        return _timestamp(text)
    if data_type in ("STRING", "JSON"):
        return text
    if data_type == "BYTES":
        if not _HEX.fullmatch(text):
            raise NullValueError(f"'{text}' is not hex text (BYTES)")
        return bytes.fromhex(text)
    raise NullValueError(f"a {data_type} column has no default null value")


def default_null_value(spec: FieldSpec) -> Any:
    """The column's default null value (configured, else the type's); NullValueError when the
    configured one does not convert. None: the column has no default (MAP, LIST, STRUCT, ...)."""
    if spec.default_null_value is None:
        return type_default(spec.data_type, spec.kind)
    return convert_default(java_text(spec.default_null_value), spec.data_type)


def default_value_problems(schema: Schema) -> list[str]:
    """One sentence per `defaultNullValue` that does not convert to its column's type."""
    problems: list[str] = []
    for spec in schema.fields:
        if spec.default_null_value is None:
            continue
        try:
            default_null_value(spec)
        except NullValueError as exc:
            problems.append(
                f"field '{spec.name}': defaultNullValue "
                f"{spec.default_null_value!r} cannot be converted to {spec.data_type}: {exc}"
            )
    return problems


def time_in_valid_range(millis: int) -> bool:
    """Pinot's `TimeUtils.timeValueInValidRange`."""
    return VALID_MIN_TIME_MS <= millis <= VALID_MAX_TIME_MS


def _not_null_names(raw: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for key in ("dimensionFieldSpecs", "metricFieldSpecs", "dateTimeFieldSpecs"):
        for entry in raw.get(key) or []:
            if isinstance(entry, dict) and entry.get("notNull") is True:
                names.add(str(entry.get("name")))
    time_spec = raw.get("timeFieldSpec")
    if isinstance(time_spec, dict) and time_spec.get("notNull") is True:
        for part in ("outgoingGranularitySpec", "incomingGranularitySpec"):
            if isinstance(time_spec.get(part), dict):
                names.add(str(time_spec[part].get("name")))
    return names


def nullable_columns(schema: Schema, table_config: Mapping[str, Any]) -> frozenset[str]:
    """The columns whose nulls Pinot records (see the module docstring); `table_config` is the
    table config's REST form."""
    if schema.raw.get("enableColumnBasedNullHandling") is True:
        not_null = _not_null_names(schema.raw)
        return frozenset(name for name in schema.column_names() if name not in not_null)
    index_config = table_config.get("tableIndexConfig") or {}
    if isinstance(index_config, dict) and index_config.get("nullHandlingEnabled") is True:
        return frozenset(schema.column_names())
    return frozenset()
