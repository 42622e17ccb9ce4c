"""Pinot's geospatial scalar functions of ingestion transforms, as Spark column expressions.

Contract: `geo_call(key, args)` compiles the call of a canonical name in `GEO_FUNCTIONS` over its
compiled arguments (`tables.segments.spark_values.Value`), or returns None for any other name.
It is dispatched from `tables.segments.transform_functions`, which makes it null-strict as Pinot's
evaluator does (a null argument gives a null result, never a row error).

Geometries are Pinot's serialized bytes (`GeometrySerializer` of pinot-segment-local, with
`GeometryType` and `GeometryUtils`): one type byte (the type id, POINT = 0 ... GEOMETRY_COLLECTION
= 6, its high bit 0x80 set for a geography, SRID 4326), then the coordinates as big-endian IEEE
754 doubles (a point: x then y, 17 bytes in all; an empty point is NaN, NaN). Between functions
and into the destination column they travel as lowercase hex text (kind STRING): that is Pinot's
own BYTES -> STRING conversion, so a BYTES column stores the bytes (the build reads hex into
binary) and a STRING column the hex, as in Pinot.

- `stPoint(x, y)` / `ST_Point`: a geometry point (type byte 0x00); `stPoint(x, y, isGeography)`
  a geography point (0x80) when the third argument is true (`BooleanUtils.toBoolean`: true, a
  number not 0, or the text "true"/"1"). The doubles are written bit for bit
  (`Double.doubleToRawLongBits`, through Spark's `java_method`: no Python per row).
- `toSphericalGeography(g)` / `toGeometry(g)`: the high bit of the type byte set / cleared. A
  point is re-serialized as Pinot does (a point with a NaN coordinate reads back empty and is
  written NaN, NaN); any other type keeps its bytes after the type byte, which is what Pinot's
  deserialize-then-serialize gives for bytes Pinot wrote.
- `stAsText(g)` / `ST_AsText`: the WKT of a point (`POINT (x y)`, `POINT EMPTY`), each ordinate as
  JTS's `WKTWriter` prints it for a floating precision model (`OrdinateFormat` with at most 16
  fraction digits, no exponent, "-0" for a negative that rounds to zero).
Bytes that are not a serialized geometry (bad hex, an unknown type id, a point of the wrong
length), and `stAsText` of anything but a point, give null, which the build records as a problem
of the row (Pinot's function throws).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from tables.segments.spark_values import STRING, Value, as_boolean, as_double, as_string

__all__ = ["GEO_FUNCTIONS", "geo_call", "point_hex"]

#: Canonical names (`tables.domain.transform_expr.canonical`) this module compiles.
GEO_FUNCTIONS = frozenset({"stpoint", "tosphericalgeography", "togeometry", "stastext"})

GEOMETRY_POINT, GEOGRAPHY_POINT = "00", "80"  # GeometryType.POINT, with GEOGRAPHY_SET_MASK
_NAN_HEX = "7ff8000000000000"  # Double.NaN
_POINT_HEX_LENGTH = 34  # 1 + 8 + 8 bytes
_MAX_FRACTION_DIGITS = 16  # PrecisionModel(FLOATING).getMaximumSignificantDigits()


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """`body(value)` with `value` written once in the plan however often `body` reads it (the
    transform of a one-element array): nested calls would otherwise copy their argument's whole
    expression into every place it is read."""
    return F.transform(F.array(value), body).getItem(0)


def _double_hex(x: Column) -> Column:
    """The 8 big-endian bytes of the double `x`, as 16 lowercase hex digits (null for null:
    reflection takes no null)."""

    def hexed(v: Column) -> Column:
        bits = F.java_method(F.lit("java.lang.Double"), F.lit("doubleToRawLongBits"), v)
        return F.when(v.isNotNull(), F.lpad(F.lower(F.hex(bits.cast("bigint"))), 16, "0"))

    return _let(x, hexed)


def point_hex(x: Column, y: Column, type_byte: Column | str = GEOMETRY_POINT) -> Column:
    """The serialized point (x, y) as hex text (null when a coordinate is null)."""
    kind = F.lit(type_byte) if isinstance(type_byte, str) else type_byte
    return F.concat(kind, _double_hex(x), _double_hex(y))


def _is_nan(hex16: Column) -> Column:
    """Whether 16 hex digits are the bits of a NaN: exponent all ones, mantissa not zero."""
    return F.substring(hex16, 1, 3).isin("7ff", "fff") & (
        F.substring(hex16, 4, 13) != F.lit("0" * 13)
    )


def _geometry(value: Value, body: Callable[[Column, Column, Column], Column]) -> Column:
    """`body(hex, type id digit, whether it reads as a geometry)` of a serialized geometry."""

    def parts(text: Column) -> Column:
        type_id = F.substring(text, 2, 1)
        valid = (
            text.rlike("^([0-9a-f]{2})+$")
            & F.substring(text, 1, 1).isin("0", "8")
            & type_id.isin("0", "1", "2", "3", "4", "5", "6")
            & ((type_id != F.lit("0")) | (F.length(text) == _POINT_HEX_LENGTH))
        )
        return body(text, type_id, valid)

    return _let(F.lower(as_string(value)), parts)


def _with_srid(value: Value, geography: bool) -> Column:
    """toSphericalGeography / toGeometry: the type byte's high bit set or cleared."""

    def rewrite(text: Column, type_id: Column, valid: Column) -> Column:
        kind = F.concat(F.lit("8" if geography else "0"), type_id)
        x, y = F.substring(text, 3, 16), F.substring(text, 19, 16)
        empty = _is_nan(x) | _is_nan(y)
        point = F.when(empty, F.concat(kind, F.lit(_NAN_HEX * 2))).otherwise(F.concat(kind, x, y))
        other = F.concat(kind, F.substring(text, 3, F.length(text)))
        return F.when(valid, F.when(type_id == F.lit("0"), point).otherwise(other))

    return _geometry(value, rewrite)


def _plain(text: Column) -> Column:
    """Java's `Double.toString` of a non-negative finite double, without its exponent."""
    pattern = r"^(\d)\.(\d+)E(-?\d+)$"
    lead = F.regexp_extract(text, pattern, 1)
    fraction = F.regexp_replace(F.regexp_extract(text, pattern, 2), "0+$", "")
    exponent = F.regexp_extract(text, pattern, 3).cast("int")
    width = F.length(fraction)
    large = F.when(
        width <= exponent,
        F.concat(lead, fraction, F.repeat(F.lit("0"), exponent - width)),
    ).otherwise(
        F.concat(
            lead,
            F.substring(fraction, F.lit(1), exponent),
            F.lit("."),
            F.substring(fraction, exponent + 1, width),
        )
    )
    small = F.concat(F.lit("0."), F.repeat(F.lit("0"), -exponent - 1), lead, fraction)
    scientific = F.when(exponent >= 0, large).otherwise(small)
    return F.when(text.contains("E"), scientific).otherwise(F.regexp_replace(text, r"\.0$", ""))


def _ordinate_text(bits: Column) -> Column:
    """JTS's OrdinateFormat (16 fraction digits) of the double whose bits are 16 hex digits."""
    negative = F.substring(bits, 1, 1).isin("8", "9", "a", "b", "c", "d", "e", "f")

    def formatted(x: Column) -> Column:
        rounded = F.bround(F.abs(x), _MAX_FRACTION_DIGITS).cast("string")
        finite = F.concat(F.when(negative, F.lit("-")).otherwise(F.lit("")), _let(rounded, _plain))
        infinite = F.when(negative, F.lit("-Inf")).otherwise(F.lit("Inf"))
        return (
            F.when(_is_nan(bits), F.lit("NaN"))
            .when(F.abs(x) == F.lit(float("inf")), infinite)
            .otherwise(finite)
        )

    return _let(_bits_to_double(bits), formatted)


def _bits_to_double(hex16: Column) -> Column:
    """The double whose bits are 16 hex digits (null for null: reflection takes no null)."""

    def double(signed: Column) -> Column:
        value = F.java_method(F.lit("java.lang.Double"), F.lit("longBitsToDouble"), signed)
        return F.when(signed.isNotNull(), value.cast("double"))

    return _let(F.conv(hex16, 16, -10).try_cast("bigint"), double)


def _as_text(value: Value) -> Column:
    """stAsText of a serialized point; null for anything else."""

    def wkt(text: Column, type_id: Column, valid: Column) -> Column:
        hx, hy = F.substring(text, 3, 16), F.substring(text, 19, 16)
        coordinates = F.concat_ws(" ", _ordinate_text(hx), _ordinate_text(hy))
        point = F.when(_is_nan(hx) | _is_nan(hy), F.lit("POINT EMPTY")).otherwise(
            F.concat(F.lit("POINT ("), coordinates, F.lit(")"))
        )
        return F.when(valid & (type_id == F.lit("0")), point)

    return _geometry(value, wkt)


def geo_call(key: str, args: list[Value]) -> Value | None:
    """The geospatial call `key` over `args`, or None when `key` is not one of them."""
    if key == "stpoint":
        kind: Column | str = GEOMETRY_POINT
        if len(args) > 2:
            geography = as_boolean(args[2])
            kind = F.when(geography, F.lit(GEOGRAPHY_POINT)).otherwise(F.lit(GEOMETRY_POINT))
        return Value(point_hex(as_double(args[0]), as_double(args[1]), kind), STRING)
    if key == "tosphericalgeography":
        return Value(_with_srid(args[0], True), STRING)
    if key == "togeometry":
        return Value(_with_srid(args[0], False), STRING)
    if key == "stastext":
        return Value(_as_text(args[0]), STRING)
    return None
