"""Pinot's geospatial transform functions on the real Spark build path (decode, then the
transform stages), table-driven; and a schema field's own `transformFunction` applied by it.

Where the expected bytes come from: Pinot's serialized geometry, as written by
pinot-segment-local `org.apache.pinot.segment.local.utils.GeometrySerializer` (`writePoint`: the
type byte, then x and y with `ByteBuffer.putDouble`, big-endian), `GeometryType` (POINT is id 0,
MULTI_POINT 1) and `GeometryUtils` (`GEOGRAPHY_SET_MASK` 0x80 for SRID 4326); the functions are
pinot-core `org.apache.pinot.core.geospatial.transform.function.ScalarFunctions` (`stPoint`,
`toSphericalGeography`, `toGeometry`, `stAsText` with JTS's `WKTWriter`). The doubles' bytes are
their IEEE 754 bits: 1.0 = 3ff0000000000000, 2.0 = 4000000000000000, -122.42 = c05e9ae147ae147b,
37.77 = 4042e28f5c28f5c3, NaN = 7ff8000000000000 (Double.NaN).
"""

from __future__ import annotations

import json

import pytest

from tables.domain.schema import parse_schema
from tables.segments import frames
from tables.segments.transforms import parse_transforms, transform_sources

pytestmark = pytest.mark.spark

ONE, TWO, NAN = "3ff0000000000000", "4000000000000000", "7ff8000000000000"
LON, LAT = "c05e9ae147ae147b", "4042e28f5c28f5c3"  # -122.42, 37.77
SF = {"group_lon": -122.42, "group_lat": 37.77}
MULTI_POINT = "01" + "00000001" + ONE + TWO  # GeometrySerializer.writeMultiPoint of one point

# (expression, destination type, message, expected)
CASES: list[tuple[str, str, dict, object]] = [
    ("stPoint(a, b)", "BYTES", {"a": 1, "b": 2}, bytes.fromhex("00" + ONE + TWO)),
    ("ST_Point(a, b)", "BYTES", {"a": "1", "b": 2.0}, bytes.fromhex("00" + ONE + TWO)),
    ("stPoint(a, b, true)", "BYTES", {"a": 1, "b": 2}, bytes.fromhex("80" + ONE + TWO)),
    ("stPoint(a, b, 'false')", "BYTES", {"a": 1, "b": 2}, bytes.fromhex("00" + ONE + TWO)),
    ("stPoint(a, b, g)", "BYTES", {"a": 1, "b": 2, "g": 1}, bytes.fromhex("80" + ONE + TWO)),
    (
        "toSphericalGeography(stPoint(group_lon,group_lat))",  # meetupRsvp_schema.json
        "BYTES",
        SF,
        bytes.fromhex("80" + LON + LAT),
    ),
    (
        "to_spherical_geography(ST_POINT(group_lon, group_lat))",
        "BYTES",
        SF,
        bytes.fromhex("80" + LON + LAT),
    ),
    (
        "toGeometry(toSphericalGeography(stPoint(group_lon, group_lat)))",
        "BYTES",
        SF,
        bytes.fromhex("00" + LON + LAT),
    ),
    # a BYTES value of the message (hex in JSON, as Pinot reads it), any case
    (
        "toSphericalGeography(g)",
        "BYTES",
        {"g": ("00" + ONE + TWO).upper()},
        bytes.fromhex("80" + ONE + TWO),
    ),
    ("toGeometry(g)", "BYTES", {"g": "80" + ONE + TWO}, bytes.fromhex("00" + ONE + TWO)),
    ("toSphericalGeography(g)", "BYTES", {"g": MULTI_POINT}, bytes.fromhex("81" + MULTI_POINT[2:])),
    # a point with a NaN coordinate is written as Pinot reads it back: empty (NaN, NaN)
    ("stPoint(a, b)", "BYTES", {"a": "NaN", "b": 2}, bytes.fromhex("00" + NAN + TWO)),
    (
        "toSphericalGeography(stPoint(a, b))",
        "BYTES",
        {"a": "NaN", "b": 2},
        bytes.fromhex("80" + NAN + NAN),
    ),
    # into a STRING column: Pinot's BYTES -> STRING is lowercase hex
    ("stPoint(a, b)", "STRING", {"a": 1, "b": 2}, "00" + ONE + TWO),
    # WKT (JTS WKTWriter: no trailing .0, no exponent, at most 16 fraction digits)
    ("stAsText(stPoint(a, b))", "STRING", {"a": 1, "b": 2}, "POINT (1 2)"),
    (
        "ST_AsText(toSphericalGeography(stPoint(group_lon, group_lat)))",
        "STRING",
        SF,
        "POINT (-122.42 37.77)",
    ),
    (
        "stAsText(stPoint(a, b))",
        "STRING",
        {"a": 1e-5, "b": 1.2345678e10},
        "POINT (0.00001 12345678000)",
    ),
    (
        "stAsText(stPoint(a, b))",
        "STRING",
        {"a": -0.0, "b": 1e22},
        "POINT (-0 10000000000000000000000)",
    ),
    (
        "stAsText(stPoint(a, b))",
        "STRING",
        {"a": 0.12345678901234568, "b": 1e-17},
        "POINT (0.1234567890123457 0)",
    ),
    ("stAsText(stPoint(a, b))", "STRING", {"a": "NaN", "b": 2}, "POINT EMPTY"),
    # nulls: a null argument gives null, without a problem (Pinot's evaluator skips the call)
    ("stPoint(a, b)", "BYTES", {"a": 1}, None),
    ("toSphericalGeography(stPoint(group_lon, group_lat))", "BYTES", {"group_lat": 37.77}, None),
    (
        "toSphericalGeography(stPoint(group_lon, group_lat))",
        "BYTES",
        {"group_lon": None, "group_lat": 1},
        None,
    ),
    ("stPoint(a, b, g)", "BYTES", {"a": 1, "b": 2}, None),
    ("stAsText(g)", "STRING", {}, None),
]


def _schema(types: list[str]):
    dims = [{"name": f"c{i}", "dataType": t} for i, t in enumerate(types)]
    return parse_schema({"schemaName": "geo", "dimensionFieldSpecs": dims})


def _run(spark, schema, configs, messages):
    transforms = parse_transforms(configs, schema)
    rows = [(i, json.dumps(m).encode()) for i, m in enumerate(messages)]
    df = spark.createDataFrame(rows, "offset bigint, value binary")
    decoded = frames.decode(df, schema, transform_sources(transforms))
    out = frames.apply_transforms(decoded, transforms, schema)
    return {r["__offset"]: r for r in out.collect()}


def test_every_geospatial_function_writes_pinots_bytes(spark):
    schema = _schema([case[1] for case in CASES])
    configs = [{"columnName": f"c{i}", "transformFunction": c[0]} for i, c in enumerate(CASES)]
    got = _run(spark, schema, configs, [case[2] for case in CASES])
    failures = []
    for i, (expression, _, message, expected) in enumerate(CASES):
        value = got[i][f"c{i}"]
        value = bytes(value) if isinstance(value, bytearray) else value
        problems = [p["raw"] for p in got[i]["__problems"] if p["column"] == f"c{i}"]
        if value != expected or problems:
            shown = value.hex() if isinstance(value, bytes) else value
            failures.append((expression, message, expected, shown, problems))
    assert failures == [], "\n".join(map(str, failures))


def test_inputs_pinot_cannot_read_are_problems_of_the_row(spark):
    """Row i is read by transform i only (each reads fields of its own)."""
    cases = [
        ("stPoint(a, b)", {"a": "east", "b": 2}, "east"),  # Double.parseDouble throws
        ("toSphericalGeography(g1)", {"g1": "zz"}, "zz"),  # not hex
        ("toSphericalGeography(g2)", {"g2": "07" + ONE + TWO}, "07" + ONE + TWO),  # no type 7
        ("toGeometry(g3)", {"g3": "00" + ONE}, "00" + ONE),  # a point too short
        ("stAsText(g4)", {"g4": MULTI_POINT}, MULTI_POINT),  # WKT of points only
    ]
    schema = _schema(["BYTES"] * 4 + ["STRING"])
    configs = [{"columnName": f"c{i}", "transformFunction": c[0]} for i, c in enumerate(cases)]
    got = _run(spark, schema, configs, [case[1] for case in cases])
    for i, (expression, _, raw) in enumerate(cases):
        problems = [(p["column"], p["raw"]) for p in got[i]["__problems"]]
        assert (got[i][f"c{i}"], problems) == (None, [(f"c{i}", raw)]), expression


def test_a_schema_fields_transform_function_fills_its_column_unless_the_table_sets_one(spark):
    """meetupRsvp_schema.json's `location`: applied like an ingestion transform; a table
    transformConfig for the same column wins (Pinot's ExpressionTransformer)."""
    fields = [
        {"name": "group_lon", "dataType": "DOUBLE"},
        {"name": "group_lat", "dataType": "DOUBLE"},
        {
            "name": "location",
            "dataType": "BYTES",
            "transformFunction": "toSphericalGeography(stPoint(group_lon,group_lat))",
        },
        {
            "name": "point",
            "dataType": "BYTES",
            "transformFunction": "stPoint(group_lon, group_lat)",
        },
    ]
    schema = parse_schema({"schemaName": "rsvp", "dimensionFieldSpecs": fields})
    table = [{"columnName": "point", "transformFunction": "stPoint(group_lat, group_lon)"}]
    messages = [SF, {"group_lat": 1.0}, {**SF, "location": "00" + ONE + TWO}]
    got = _run(spark, schema, table, messages)
    assert bytes(got[0]["location"]).hex() == "80" + LON + LAT
    assert bytes(got[0]["point"]).hex() == "00" + LAT + LON  # the table's transform
    assert (got[1]["location"], got[1]["__problems"]) == (None, [])
    assert bytes(got[2]["location"]).hex() == "00" + ONE + TWO  # a value given is kept
