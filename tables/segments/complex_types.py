"""Pinot's `ingestionConfig.complexTypeConfig` on decoded messages, as Spark columns.

Pinot's ComplexTypeTransformer runs before the transforms and the filter; this build honours it
while decoding (`tables.segments.frames.decode_stages(..., complex_types=..., unnest=...)`), on
each field's raw text (strings unquoted, objects and arrays as JSON text):
- `nested_field(parsed, name, delimiter)`: flattening. A column `a<delimiter>b<delimiter>c` reads
  the field `b`, then `c`, of the object `a` (Spark's `get_json_object`; a name part with a quote
  is not flattened); as Pinot's flattening overwrites a top-level field of that very name, such a
  field is read only when the nested one is absent (or null). The object `a` itself stays
  readable (Pinot 1.x keeps the map).
- `collection_text(raw, spec, mode)`: collectionNotUnnestedToJson. `NON_PRIMITIVE` (Pinot's
  default) gives a multi-value column an array of objects or arrays as one JSON text (one value),
  `ALL` any array, `NONE` leaves arrays as they are and gives a single-value column the only
  element of a one-element array. A single-value column otherwise gets a collection as its JSON
  text, as without complexTypeConfig.
- `fieldsToUnnest` (`unnest_fields(config)`: the names sorted, as Pinot sorts them so that a
  parent `a` is unnested before its child `a.b`): `unnest_stages` explodes each listed array
  (`posexplode_outer` over `from_json`, one `select` per field, in that order), so a message
  gives one row per element, the cross product for several fields. The array of `a.b` is read
  from the element of `a` when `a` is unnested too, else through flattening. `read_field` then
  reads a column `U<delimiter>x<delimiter>y` from the element of the deepest unnested field `U`
  it lies under (nested `x.y`, else the element's own key `x.y`, as Pinot flattens an element's
  maps), a column named `U` itself is the element (an object as its JSON text), and any other
  column as without unnesting. An empty or missing array keeps the message once with those
  columns null (Pinot: "use the record itself"); so does a value that is no array (Pinot drops
  that record: here every offset keeps a row, for the ledger).
  Every row keeps its message's offset and gets `UNNEST_KEY`: its element positions, one
  zero-padded number per unnested field (empty or missing: 0, else position + 1), joined by "."
  in field order, so that (offset, UNNEST_KEY) orders the rows of one offset as Pinot emits
  them, totally, and a build always writes them in the same order.
- `prefixesToRename` is refused before a build (`tables.domain.transform_expr`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tables.domain.schema import FieldSpec

__all__ = [
    "UNNEST_KEY",
    "collection_text",
    "nested_field",
    "read_field",
    "unnest_fields",
    "unnest_stages",
]

UNNEST_KEY = "__unnestIndex"
_ELEMENT = "__unnest{}"  # the element text of the i-th unnested field
_POSITION = "__unnestPos{}"  # its position (null: the array was empty or missing)
_DIGITS = 10  # an array position (< 2**31) in decimal


def unnest_fields(config: object) -> tuple[str, ...]:
    """The `fieldsToUnnest` of a complexTypeConfig, distinct and sorted as Pinot unnests them."""
    if not isinstance(config, Mapping):
        return ()
    fields = config.get("fieldsToUnnest") or []
    return tuple(sorted({f for f in fields if isinstance(f, str) and f}))


def _path(parts: Sequence[str]) -> str | None:
    if not parts or any(not part or "'" in part for part in parts):
        return None
    return "$" + "".join(f"['{part}']" for part in parts)


def nested_field(parsed: Column, name: str, delimiter: str) -> Column:
    """Flattened, `b.c` of the object `a` for `a.b.c`, else the message's field `name`."""
    top = parsed.getField(name)
    head, *rest = name.split(delimiter)
    path = _path(rest)
    if not rest or not head or path is None:
        return top
    return F.coalesce(F.get_json_object(parsed.getField(head), path), top)


def _element_field(element: Column, rest: str, delimiter: str) -> Column:
    """`rest` of an unnested element: nested (`x` then `y` for `x.y`), else its key `x.y`."""
    reads = [_path(rest.split(delimiter)), _path([rest])]
    found = [F.get_json_object(element, p) for p in dict.fromkeys(reads) if p is not None]
    if not found:
        return F.lit(None).cast("string")
    return found[0] if len(found) == 1 else F.coalesce(*found)


def read_field(parsed: Column, name: str, delimiter: str, unnested: Sequence[str] = ()) -> Column:
    """The raw text of column `name` once the fields `unnested` (sorted) are exploded."""
    owner = None
    for index, field in enumerate(unnested):
        if name == field or name.startswith(field + delimiter):
            owner = index  # sorted: a deeper field comes later
    if owner is None:
        return nested_field(parsed, name, delimiter)
    element = F.col(_ELEMENT.format(owner))
    if name == unnested[owner]:
        return element
    return _element_field(element, name[len(unnested[owner]) + len(delimiter) :], delimiter)


def unnest_stages(
    parsed: str, unnested: Sequence[str], delimiter: str, keep: Sequence[str]
) -> list[list[Column]]:
    """The selects that explode `unnested` (sorted; `parsed`: the struct column of the message's
    top-level fields as text), keeping the columns `keep`; the last adds `UNNEST_KEY` and drops
    the positions. Element columns stay for `read_field`."""
    stages: list[list[Column]] = []
    done: list[str] = []
    for index, field in enumerate(unnested):
        array = read_field(F.col(parsed), field, delimiter, unnested[:index])
        items = F.from_json(array, T.ArrayType(T.StringType()))
        stages.append(
            [
                *[F.col(c) for c in [*keep, parsed, *done]],
                F.posexplode_outer(items).alias(_POSITION.format(index), _ELEMENT.format(index)),
            ]
        )
        done += [_POSITION.format(index), _ELEMENT.format(index)]
    positions = [
        F.lpad(F.coalesce(F.col(_POSITION.format(i)) + 1, F.lit(0)).cast("string"), _DIGITS, "0")
        for i in range(len(unnested))
    ]
    elements = [F.col(_ELEMENT.format(i)) for i in range(len(unnested))]
    last = [*[F.col(c) for c in [*keep, parsed]], *elements]
    stages.append([*last, F.concat_ws(".", *positions).alias(UNNEST_KEY)])
    return stages


def collection_text(raw: Column, spec: FieldSpec, to_json: str) -> Column:
    """collectionNotUnnestedToJson for one column's raw text (see the module docstring)."""
    items = F.from_json(raw, T.ArrayType(T.StringType()))
    is_array = raw.startswith("[") & items.isNotNull()
    if spec.single_value:
        if to_json != "NONE":
            return raw
        return F.when(is_array & (F.size(items) == 1), F.try_element_at(items, F.lit(1))).otherwise(
            raw
        )
    if to_json == "NONE":
        return raw
    nested = F.exists(items, lambda item: item.startswith("{") | item.startswith("["))
    as_text = is_array if to_json == "ALL" else is_array & nested
    return F.when(as_text, F.to_json(F.array(raw))).otherwise(raw)
