"""Pinot's `ingestionConfig.complexTypeConfig` on decoded messages, as Spark columns.

Pinot's ComplexTypeTransformer runs before the transforms; this build honours it while decoding
(`tables.segments.frames.decode_stages(..., complex_types=...)`), on each field's raw text (strings
unquoted, objects and arrays as JSON text):
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
- `fieldsToUnnest` is refused before a build (`tables.domain.transform_expr.complex_type_problems`):
  an unnested row would share its stream offset with its siblings, and a segment holds one row
  per offset (the ledger proves exactly-once by offsets).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tables.domain.schema import FieldSpec

__all__ = ["collection_text", "nested_field"]


def nested_field(parsed: Column, name: str, delimiter: str) -> Column:
    """Flattened, `b.c` of the object `a` for `a.b.c`, else the message's field `name`."""
    top = parsed.getField(name)
    head, *rest = name.split(delimiter)
    if not rest or not head or any(not part or "'" in part for part in rest):
        return top
    path = "$" + "".join(f"['{part}']" for part in rest)
    return F.coalesce(F.get_json_object(parsed.getField(head), path), top)


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
