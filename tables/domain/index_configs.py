"""The indexes a table config declares that the segment build does not produce. Pure.

Pinot tables declare indexes in two places, both accepted and stored as written:
- `tableIndexConfig`: `invertedIndexColumns`, `rangeIndexColumns`, `bloomFilterColumns` (and
  `bloomFilterConfigs`), `jsonIndexColumns` (and `jsonIndexConfigs`), `sortedColumn`,
  `starTreeIndexConfigs`, `enableDefaultStarTree`;
- `fieldConfigList`: per column, the legacy `indexType` / `indexTypes` (TEXT, FST, H3, INVERTED,
  ...) and the newer `indexes` map (`inverted`, `range`, `bloom`, `json`, `text`, `fst`, `h3`,
  `vector`, ...), and `timestampConfig` (the timestamp index).
This project's segments are one Parquet file sorted by time then offset, served by no query
engine, so none of them is built. `unbuilt_indexes(config)` lists each declared one as an
`UnbuiltIndex` (Pinot's index name, the columns, where it is declared, and why it is not built),
in the order above; dictionary and encoding settings (`noDictionaryColumns`, `encodingType`,
`forward`) are not indexes and are not listed. Anything malformed is skipped: validation is
elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["NOT_BUILT", "UnbuiltIndex", "unbuilt_indexes"]

NOT_BUILT = "not built by this build: no query engine here"
_SORTED = "not built: segments are sorted by the time column, then the stream offset"
_TABLE_LISTS = (
    ("inverted", "invertedIndexColumns"),
    ("range", "rangeIndexColumns"),
    ("bloom", "bloomFilterColumns"),
    ("json", "jsonIndexColumns"),
)
_TABLE_MAPS = (("bloom", "bloomFilterConfigs"), ("json", "jsonIndexConfigs"))
_NOT_INDEXES = frozenset({"forward", "dictionary", "null", "nullvalue"})


@dataclass(frozen=True)
class UnbuiltIndex:
    index: str  # Pinot's index name: inverted, range, bloom, json, text, fst, h3, vector, ...
    columns: tuple[str, ...]
    where: str  # the config key that declares it
    reason: str = NOT_BUILT


def _names(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        return [v for v in value if isinstance(v, str) and v]
    return []


def _table_index_config(section: Mapping[str, Any]) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for index, key in _TABLE_LISTS:
        for column in _names(section.get(key)):
            found.setdefault((index, f"tableIndexConfig.{key}"), []).append(column)
    for index, key in _TABLE_MAPS:
        value = section.get(key)
        if isinstance(value, Mapping):
            for column in value:
                found.setdefault((index, f"tableIndexConfig.{key}"), []).append(str(column))
    return found


def _star_trees(section: Mapping[str, Any]) -> list[UnbuiltIndex]:
    trees = section.get("starTreeIndexConfigs")
    out = []
    if isinstance(trees, list):
        for tree in trees:
            split = tree.get("dimensionsSplitOrder") if isinstance(tree, Mapping) else None
            out.append(
                UnbuiltIndex(
                    "star-tree", tuple(_names(split)), "tableIndexConfig.starTreeIndexConfigs"
                )
            )
    if section.get("enableDefaultStarTree") is True:
        out.append(UnbuiltIndex("star-tree", (), "tableIndexConfig.enableDefaultStarTree"))
    return out


def _field_configs(fields: object) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for entry in fields if isinstance(fields, list) else []:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        column = entry["name"]
        declared = _names(entry.get("indexTypes")) + _names(entry.get("indexType"))
        kinds = [k.lower() for k in declared]
        indexes = entry.get("indexes")
        if isinstance(indexes, Mapping):
            kinds += [str(k).lower() for k in indexes]
        if isinstance(entry.get("timestampConfig"), Mapping):
            kinds.append("timestamp")
        for kind in dict.fromkeys(kinds):
            if kind not in _NOT_INDEXES:
                found.setdefault((kind, "fieldConfigList"), []).append(column)
    return found


def unbuilt_indexes(config: object) -> list[UnbuiltIndex]:
    """Every index `config` (a table config, REST form) declares, none of them built."""
    if not isinstance(config, Mapping):
        return []
    section = config.get("tableIndexConfig")
    section = section if isinstance(section, Mapping) else {}
    found = _table_index_config(section)
    out = [UnbuiltIndex(index, tuple(cols), where) for (index, where), cols in found.items()]
    sorted_columns = _names(section.get("sortedColumn"))
    if sorted_columns:
        out.append(
            UnbuiltIndex("sorted", tuple(sorted_columns), "tableIndexConfig.sortedColumn", _SORTED)
        )
    out += _star_trees(section)
    fields = _field_configs(config.get("fieldConfigList"))
    out += [UnbuiltIndex(index, tuple(cols), where) for (index, where), cols in fields.items()]
    return out
