"""Pinot schemas: parse and validate the REST JSON, convert to and from the ZooKeeper ZNRecord.

Contract:
- `parse_schema(data)` accepts the JSON object Pinot's `/schemas` endpoint takes (already decoded
  from text) and returns a frozen `Schema`, or raises `SchemaError` whose `problems` lists every
  problem found (one sentence each), never only the first.
- `Schema.raw` is a deep copy of the object given, untouched, so the document round-trips without
  loss: `schema_from_znrecord(schema_to_znrecord(s)).raw == s.raw`.
- The ZooKeeper form (`/PROPERTYSTORE/SCHEMAS/<name>`) is a ZNRecord whose id is the schema name
  and whose only simple field `schemaJSON` holds the compact JSON text of the schema.
- Fields are ordered dimensions, metrics, dateTimes, then the deprecated `timeFieldSpec`; field
  names are unique across all of them. Unknown top-level keys (`enableColumnBasedNullHandling`,
  ...) are kept in `raw` and otherwise ignored.
- A field spec's `transformFunction` (Pinot's older form of an ingestion transform, applied to
  that column unless the table's `transformConfigs` has one for it) is kept in
  `FieldSpec.transform_function`. `schema_transform_problems(schema, skip)` gives one sentence per
  such function the build cannot run, read by the one transform parser
  (`tables.domain.transform_expr`), naming the column and the function; a function may not read
  its own column (Pinot's SchemaUtils). `parse_schema(data, for_write=True)` (a schema about to be
  created or updated) refuses them; a schema read back is never refused for them.
- A `defaultNullValue` that does not convert to its column's type (Pinot's `DataType.convert`,
  `tables.domain.null_values`) is refused the same way: on write only, naming the column.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tables.domain.names import schema_name_problem
from tables.domain.null_values import default_value_problems
from tables.domain.transform_expr import TransformExprError, columns_of, parse_transform
from tables.domain.znrecord import ZNRecord

__all__ = [
    "DATA_TYPES",
    "SCHEMA_JSON_FIELD",
    "FieldKind",
    "FieldSpec",
    "Schema",
    "SchemaError",
    "parse_schema",
    "schema_from_znrecord",
    "schema_to_znrecord",
    "schema_transform_problems",
]

#: The simple field of the schema ZNRecord that holds the schema JSON.
SCHEMA_JSON_FIELD = "schemaJSON"

#: Pinot's `FieldSpec.DataType` values a schema may declare.
DATA_TYPES: frozenset[str] = frozenset(
    {
        "INT",
        "LONG",
        "FLOAT",
        "DOUBLE",
        "BIG_DECIMAL",
        "BOOLEAN",
        "TIMESTAMP",
        "STRING",
        "JSON",
        "BYTES",
        "MAP",
        "LIST",
        "STRUCT",
    }
)

_SPEC_LISTS = (
    ("dimensionFieldSpecs", "DIMENSION"),
    ("metricFieldSpecs", "METRIC"),
    ("dateTimeFieldSpecs", "DATE_TIME"),
)
_TIME_FIELD_SPEC = "timeFieldSpec"


class SchemaError(ValueError):
    """A schema that Pinot would refuse; `problems` holds every reason, one sentence each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class FieldKind(StrEnum):
    DIMENSION = "DIMENSION"
    METRIC = "METRIC"
    DATE_TIME = "DATE_TIME"
    TIME = "TIME"


@dataclass(frozen=True)
class FieldSpec:
    name: str
    data_type: str
    kind: FieldKind
    single_value: bool = True
    format: str | None = None
    granularity: str | None = None
    default_null_value: object | None = None
    transform_function: str | None = None


@dataclass(frozen=True)
class Schema:
    name: str
    fields: tuple[FieldSpec, ...]
    primary_key_columns: tuple[str, ...]
    raw: dict[str, Any]

    def field(self, name: str) -> FieldSpec | None:
        """The field spec called `name`, or None."""
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None

    def column_names(self) -> tuple[str, ...]:
        """Every column name, in field order."""
        return tuple(spec.name for spec in self.fields)


def _describe(value: object) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else f"'{value}'"


def _check_name_and_type(spec: dict[str, Any], where: str, problems: list[str]) -> str | None:
    """Validate `name` and `dataType` of one spec; return the name when it is usable."""
    name = spec.get("name")
    usable: str | None = None
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{where} must have a non-empty string 'name'")
    else:
        usable = name
    data_type = spec.get("dataType")
    label = f"field '{usable}'" if usable else where
    if data_type is None:
        problems.append(f"{label} has no dataType")
    elif not isinstance(data_type, str) or data_type not in DATA_TYPES:
        allowed = ", ".join(sorted(DATA_TYPES))
        problems.append(
            f"{label} has unknown dataType {_describe(data_type)} (expected one of {allowed})"
        )
    single = spec.get("singleValueField", True)
    if not isinstance(single, bool):
        problems.append(f"{label} has a singleValueField that is not true or false")
    return usable


def _parse_spec_list(
    data: dict[str, Any], key: str, kind: FieldKind, problems: list[str]
) -> list[FieldSpec]:
    entries = data.get(key)
    if entries is None:
        return []
    if not isinstance(entries, list):
        problems.append(f"{key} must be a list of field specs")
        return []
    specs: list[FieldSpec] = []
    for index, entry in enumerate(entries, start=1):
        where = f"{key} entry #{index}"
        if not isinstance(entry, dict):
            problems.append(f"{where} must be a JSON object")
            continue
        name = _check_name_and_type(entry, where, problems)
        fmt = entry.get("format")
        granularity = entry.get("granularity")
        if kind is FieldKind.DATE_TIME:
            label = f"dateTime field '{name}'" if name else where
            if not isinstance(fmt, str) or not fmt.strip():
                problems.append(f"{label} must have a non-empty 'format'")
            if not isinstance(granularity, str) or not granularity.strip():
                problems.append(f"{label} must have a non-empty 'granularity'")
        if name is None:
            continue
        function = entry.get("transformFunction")
        specs.append(
            FieldSpec(
                name=name,
                data_type=str(entry.get("dataType")),
                kind=kind,
                single_value=entry.get("singleValueField", True) is not False,
                format=fmt if isinstance(fmt, str) else None,
                granularity=granularity if isinstance(granularity, str) else None,
                default_null_value=entry.get("defaultNullValue"),
                transform_function=function if isinstance(function, str) else None,
            )
        )
        if function is not None and not isinstance(function, str):
            problems.append(f"field '{name}' has a transformFunction that is not a text")
    return specs


def _parse_time_field_spec(data: dict[str, Any], problems: list[str]) -> list[FieldSpec]:
    spec = data.get(_TIME_FIELD_SPEC)
    if spec is None:
        return []
    if not isinstance(spec, dict):
        problems.append("timeFieldSpec must be a JSON object")
        return []
    incoming = spec.get("incomingGranularitySpec")
    if not isinstance(incoming, dict):
        problems.append("timeFieldSpec must have an incomingGranularitySpec object")
        return []
    outgoing = spec.get("outgoingGranularitySpec")
    granularity_spec = outgoing if isinstance(outgoing, dict) else incoming
    where = "timeFieldSpec granularity spec"
    name = _check_name_and_type(granularity_spec, where, problems)
    time_type = granularity_spec.get("timeType")
    if not isinstance(time_type, str) or not time_type.strip():
        problems.append(f"{where} must have a non-empty 'timeType'")
        return []
    if name is None:
        return []
    size = granularity_spec.get("timeUnitSize", 1)
    time_format = granularity_spec.get("timeFormat", "EPOCH")
    return [
        FieldSpec(
            name=name,
            data_type=str(granularity_spec.get("dataType")),
            kind=FieldKind.TIME,
            single_value=True,
            format=f"{size}:{time_type}:{time_format}",
            granularity=f"{size}:{time_type}",
            default_null_value=spec.get("defaultNullValue"),
        )
    ]


def schema_transform_problems(schema: Schema, skip: Iterable[str] = ()) -> list[str]:
    """One sentence per field `transformFunction` the build cannot run (columns in `skip`, which
    the table's own transformConfigs set, are not read)."""
    skipped = set(skip)
    problems: list[str] = []
    for spec in schema.fields:
        text = spec.transform_function
        if text is None or spec.name in skipped:
            continue
        where = f"field '{spec.name}': transform function {text.strip()!r}"
        try:
            expr = parse_transform(text)
        except TransformExprError as exc:
            culprit = f" (function {exc.function})" if exc.function else ""
            problems.append(f"{where} cannot be run{culprit}: {exc}")
            continue
        if spec.name in columns_of(expr):
            problems.append(f"{where} must not read its own column '{spec.name}'")
    return problems


def parse_schema(data: object, *, for_write: bool = False) -> Schema:
    """Validate a schema's REST JSON and return it as a `Schema`; raise `SchemaError` otherwise.
    `for_write`: the schema is about to be created or updated (transform functions are checked)."""
    if not isinstance(data, dict):
        raise SchemaError(["The schema must be a JSON object"])
    problems: list[str] = []
    name = data.get("schemaName")
    if not isinstance(name, str) or not name.strip():
        problems.append("schemaName is required and must be a non-empty string")
    elif problem := schema_name_problem(name):  # where names go (tables.domain.names)
        problems.append(problem)
    fields: list[FieldSpec] = []
    for key, kind in _SPEC_LISTS:
        fields.extend(_parse_spec_list(data, key, FieldKind(kind), problems))
    fields.extend(_parse_time_field_spec(data, problems))

    seen: set[str] = set()
    reported: set[str] = set()
    for spec in fields:
        if spec.name in seen and spec.name not in reported:
            problems.append(f"Column '{spec.name}' is defined more than once")
            reported.add(spec.name)
        seen.add(spec.name)

    primary_keys: list[str] = []
    raw_keys = data.get("primaryKeyColumns")
    if raw_keys is not None:
        if not isinstance(raw_keys, list) or not all(isinstance(k, str) for k in raw_keys):
            problems.append("primaryKeyColumns must be a list of column names")
        else:
            primary_keys = list(raw_keys)
            for column in primary_keys:
                if column not in seen:
                    problems.append(f"Primary key column '{column}' is not a column of the schema")

    schema = Schema(
        name=str(name),
        fields=tuple(fields),
        primary_key_columns=tuple(primary_keys),
        raw=copy.deepcopy(data),
    )
    if for_write:
        problems.extend(schema_transform_problems(schema))
        problems.extend(default_value_problems(schema))  # Pinot: "Cannot convert value"
    if problems:
        raise SchemaError(problems)
    return schema


def schema_to_znrecord(schema: Schema) -> ZNRecord:
    """The ZNRecord stored at `/PROPERTYSTORE/SCHEMAS/<schema name>`."""
    text = json.dumps(schema.raw, separators=(",", ":"), ensure_ascii=False)
    return ZNRecord(id=schema.name, simple_fields={SCHEMA_JSON_FIELD: text})


def schema_from_znrecord(record: ZNRecord) -> Schema:
    """Read a schema back from its ZNRecord; raise `SchemaError` if it is missing or invalid."""
    text = record.simple_fields.get(SCHEMA_JSON_FIELD)
    if text is None:
        raise SchemaError([f"ZNRecord '{record.id}' has no '{SCHEMA_JSON_FIELD}' simple field"])
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(
            [f"ZNRecord '{record.id}' holds schema JSON that does not parse: {exc}"]
        ) from None
    return parse_schema(data)
