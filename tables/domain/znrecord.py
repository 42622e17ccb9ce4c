"""Helix's ZNRecord: the JSON document stored in every Pinot/Helix znode.

Shape: {"id": str, "simpleFields": {str: str}, "mapFields": {str: {str: str}},
"listFields": {str: [str]}}. Every simple value is a string. Readers accept any JSON object of that
shape (missing members read as empty, unknown members are ignored); writers emit Helix's own layout:
Jackson's default pretty printer (`"key" : value`, two-space indent) with sorted keys in the inner
maps. Compression (gzip) is a storage concern handled by `tables.zk.codec`, not here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _quote  # C-accelerated; as ensure_ascii=False
from typing import Any

__all__ = ["ZNRecord", "ZNRecordError"]


class ZNRecordError(ValueError):
    """Bytes or a dict that are not a ZNRecord."""


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ZNRecordError(f"{where} must be an object")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


@dataclass
class ZNRecord:
    id: str
    simple_fields: dict[str, str] = field(default_factory=dict)
    map_fields: dict[str, dict[str, str]] = field(default_factory=dict)
    list_fields: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "simpleFields": dict(sorted(self.simple_fields.items())),
            "mapFields": {k: dict(sorted(v.items())) for k, v in sorted(self.map_fields.items())},
            "listFields": {k: list(v) for k, v in sorted(self.list_fields.items())},
        }

    @classmethod
    def from_dict(cls, data: Any) -> ZNRecord:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise ZNRecordError("a ZNRecord is a JSON object with a string 'id'")
        maps = data.get("mapFields") or {}
        lists = data.get("listFields") or {}
        if not isinstance(maps, dict) or not isinstance(lists, dict):
            raise ZNRecordError("mapFields and listFields must be objects")
        return cls(
            id=data["id"],
            simple_fields=_str_map(data.get("simpleFields"), "simpleFields"),
            map_fields={str(k): _str_map(v, f"mapFields.{k}") for k, v in maps.items()},
            list_fields={str(k): [str(item) for item in (v or [])] for k, v in lists.items()},
        )

    def to_json(self) -> str:
        """Helix's serialised form (Jackson INDENT_OUTPUT): exactly `json.dumps(self.to_dict(),
        indent=2, ensure_ascii=False, separators=(",", " : "))` (Jackson's default pretty printer
        puts a space before the colon as well), written out directly for this fixed shape: the
        generic indenting encoder is pure Python, and every IdealState write encodes the whole
        record."""
        return "".join(
            (
                '{\n  "id" : ',
                _quote(self.id),
                ',\n  "simpleFields" : ',
                _flat(sorted(self.simple_fields.items()), "    ", "  "),
                ',\n  "mapFields" : ',
                _nested(sorted(self.map_fields.items())),
                ',\n  "listFields" : ',
                _lists(sorted(self.list_fields.items())),
                "\n}",
            )
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> ZNRecord:
        try:
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ZNRecordError(f"not JSON: {exc}") from None
        return cls.from_dict(data)

    def copy(self) -> ZNRecord:
        return ZNRecord(
            id=self.id,
            simple_fields=dict(self.simple_fields),
            map_fields={k: dict(v) for k, v in self.map_fields.items()},
            list_fields={k: list(v) for k, v in self.list_fields.items()},
        )

    def shallow_copy(self) -> ZNRecord:
        """A copy whose field dicts are new but whose maps and lists are this record's own: for
        a change that replaces whole entries (never edits a map or list in place), at a fraction
        of `copy`'s cost on a record of thousands of entries."""
        return ZNRecord(
            id=self.id,
            simple_fields=dict(self.simple_fields),
            map_fields=dict(self.map_fields),
            list_fields=dict(self.list_fields),
        )


def _flat(items: list[tuple[str, str]], inner: str, outer: str) -> str:
    """A {str: str} object whose members are indented by `inner` and whose closing brace by
    `outer`."""
    if not items:
        return "{}"
    body = ",\n".join(f"{inner}{_quote(k)} : {_quote(v)}" for k, v in items)
    return f"{{\n{body}\n{outer}}}"


def _nested(items: list[tuple[str, dict[str, str]]]) -> str:
    if not items:
        return "{}"
    body = ",\n".join(
        f"    {_quote(k)} : {_flat(sorted(v.items()), '      ', '    ')}" for k, v in items
    )
    return f"{{\n{body}\n  }}"


def _lists(items: list[tuple[str, list[str]]]) -> str:
    if not items:
        return "{}"

    def one(values: list[str]) -> str:
        if not values:
            return "[]"
        return "[\n" + ",\n".join(f"      {_quote(v)}" for v in values) + "\n    ]"

    body = ",\n".join(f"    {_quote(k)} : {one(v)}" for k, v in items)
    return f"{{\n{body}\n  }}"
