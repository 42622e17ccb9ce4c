"""Stream config maps of a REALTIME table config: where they are, how they read, what Pinot refuses.

Contract:
- Pure functions over the decoded REST JSON (no I/O, no state); only the standard library and
  `tables.domain.flush`, whose `parse_period_ms` / `parse_size_bytes` are the single parsers of
  periods and data sizes. Nothing here imports `tables.domain.table_config`, which builds on it.
- Functions take the table config's `ingestionConfig` and `tableIndexConfig` sections (empty
  mappings when absent or not objects) rather than the whole config.
- `raw_stream_maps` returns the stream config maps as written: `streamIngestionConfig.
  streamConfigMaps` when that key is set (a non-list gives []), else the legacy non-empty
  `tableIndexConfig.streamConfigs` as a one-element list, else [].
- `check_streams` returns every problem of the stream configs (one sentence each, in a stable
  order), with the checks of Pinot's `TableConfigUtils` that concern streams (reference §3.2,
  §3.3). The caller says whether the table is an upsert table; the pauseless peer-download rule
  needs the replication, so it stays with the caller (see `pauseless_enabled`).
- `stream_value`, `is_flag`, `truthy` and `is_timestamp` read JSON values as Pinot's string maps
  and boolean flags do; the table config module shares them.
- `disaster_recovery_mode` reads `streamIngestionConfig.disasterRecoveryMode` (Pinot's enum
  `DisasterRecoveryMode`: `ALWAYS` or `DEFAULT`, exactly as written; absent or null is `DEFAULT`);
  `check_streams` refuses any other value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from tables.domain.flush import (
    DEFAULT_FLUSH_THRESHOLD_TIME_MS,
    FLUSH_AUTOTUNE_INITIAL_ROWS,
    FLUSH_DESIRED_SIZE_LEGACY,
    FLUSH_THRESHOLD_ROWS,
    FLUSH_THRESHOLD_ROWS_LEGACY,
    FLUSH_THRESHOLD_SEGMENT_ROWS,
    FLUSH_THRESHOLD_SEGMENT_SIZE,
    FLUSH_THRESHOLD_TIME,
    FLUSH_THRESHOLD_TIME_LEGACY,
    FLUSH_THRESHOLD_VARIANCE_FRACTION,
    MAX_VARIANCE_FRACTION,
    parse_period_ms,
    parse_size_bytes,
)

__all__ = [
    "DISASTER_RECOVERY_MODE",
    "LEGACY_STREAM_CONFIGS",
    "OFFSET_RESET",
    "PAUSELESS",
    "STREAM_CONFIG_MAPS",
    "STREAM_INGESTION",
    "STREAM_TYPE",
    "TOPIC",
    "DisasterRecoveryMode",
    "check_streams",
    "disaster_recovery_mode",
    "is_flag",
    "is_timestamp",
    "pauseless_enabled",
    "raw_stream_maps",
    "stream_value",
    "truthy",
]

STREAM_TYPE = "streamType"
#: Stream properties, each read as `stream.<streamType>.<prop>`.
TOPIC = "topic.name"
OFFSET_RESET = "consumer.prop.auto.offset.reset"
#: Keys of `ingestionConfig` / `streamIngestionConfig` / `tableIndexConfig`.
STREAM_INGESTION = "streamIngestionConfig"
STREAM_CONFIG_MAPS = "streamConfigMaps"
PAUSELESS = "pauselessConsumptionEnabled"
DISASTER_RECOVERY_MODE = "disasterRecoveryMode"
LEGACY_STREAM_CONFIGS = "streamConfigs"

_ROWS_KEYS = (FLUSH_THRESHOLD_ROWS, *FLUSH_THRESHOLD_ROWS_LEGACY)
_TIME_KEYS = (FLUSH_THRESHOLD_TIME, *FLUSH_THRESHOLD_TIME_LEGACY)
_SIZE_KEYS = (FLUSH_THRESHOLD_SEGMENT_SIZE, *FLUSH_DESIRED_SIZE_LEGACY)

#: (streamType, topic, flush parameters) of one readable stream config.
_StreamSummary = tuple[str | None, str | None, tuple[Any, ...]]


def stream_value(value: object) -> str | None:
    """A stream-config value as Pinot's Map<String, String> would hold it; None if not a scalar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def truthy(value: object) -> bool:
    """True for JSON true or the string "true" (any case, surrounding blanks ignored)."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def is_flag(value: object) -> bool:
    """Whether `value` is an acceptable boolean flag: absent, a boolean or "true" / "false"."""
    return value is None or isinstance(value, bool) or (
        isinstance(value, str) and value.strip().lower() in ("true", "false")
    )  # fmt: skip


def is_timestamp(text: str) -> bool:
    """Whether `text` is an ISO-8601 timestamp."""
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def raw_stream_maps(ingestion: Mapping[str, Any], index_config: Mapping[str, Any]) -> list[Any]:
    """The stream config maps as written (entries not checked); see the module docstring."""
    stream_ingestion = ingestion.get(STREAM_INGESTION)
    if isinstance(stream_ingestion, dict) and stream_ingestion.get(STREAM_CONFIG_MAPS) is not None:
        maps = stream_ingestion[STREAM_CONFIG_MAPS]
        return list(maps) if isinstance(maps, list) else []
    legacy = index_config.get(LEGACY_STREAM_CONFIGS)
    return [legacy] if isinstance(legacy, dict) and legacy else []


def pauseless_enabled(ingestion: Mapping[str, Any]) -> bool:
    """`ingestionConfig.streamIngestionConfig.pauselessConsumptionEnabled` is true."""
    stream_ingestion = ingestion.get(STREAM_INGESTION)
    return isinstance(stream_ingestion, dict) and truthy(stream_ingestion.get(PAUSELESS))


class DisasterRecoveryMode(StrEnum):
    """Pinot's `DisasterRecoveryMode`: whether the healer may repair (re-ingest, reset) COMMITTING
    segments of partial-upsert and dedup tables (`ALWAYS`) or leaves them alone (`DEFAULT`)."""

    ALWAYS = "ALWAYS"
    DEFAULT = "DEFAULT"


def disaster_recovery_mode(ingestion: Mapping[str, Any]) -> DisasterRecoveryMode:
    """`ingestionConfig.streamIngestionConfig.disasterRecoveryMode`; DEFAULT when absent, null or
    not one of the enum's names (`check_streams` refuses those)."""
    stream_ingestion = ingestion.get(STREAM_INGESTION)
    value = (
        stream_ingestion.get(DISASTER_RECOVERY_MODE) if isinstance(stream_ingestion, dict) else None
    )
    if isinstance(value, str) and value in DisasterRecoveryMode.__members__:
        return DisasterRecoveryMode(value)
    return DisasterRecoveryMode.DEFAULT


def _disaster_recovery_problem(value: object) -> str | None:
    if value is None or (isinstance(value, str) and value in DisasterRecoveryMode.__members__):
        return None
    names = ", ".join(mode.value for mode in DisasterRecoveryMode)
    shown = f"'{value}'" if isinstance(value, str) else json.dumps(value)
    return f"streamIngestionConfig.disasterRecoveryMode must be one of [{names}], got {shown}"


def _optional(parse: Callable[[str], Any], text: str) -> Any:
    """`parse(text)`, or None when it raises ValueError."""
    try:
        return parse(text)
    except ValueError:
        return None


def _parse_count(text: str) -> int | None:
    return int(text) if text.isdecimal() else None


def _parse_time(text: str) -> int | None:
    return _optional(parse_period_ms, text) or None


def _parse_size(text: str) -> int | None:
    return _optional(parse_size_bytes, text)


def _parse_variance(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= MAX_VARIANCE_FRACTION else None


def _is_offset_period(text: str) -> bool:
    """A non-zero period like '2d' (plain milliseconds are a flush-time form, not an offset)."""
    return not text.isdigit() and bool(_optional(parse_period_ms, text))


_COUNT = "a non-negative integer"
#: (keys, first present wins; parser returning None when invalid; what a valid value looks like)
_FLUSH_CHECKS: tuple[tuple[tuple[str, ...], Callable[[str], Any], str], ...] = (
    (_ROWS_KEYS, _parse_count, _COUNT),
    ((FLUSH_THRESHOLD_SEGMENT_ROWS,), _parse_count, _COUNT),
    (_TIME_KEYS, _parse_time, "a positive period like '6h', '30m', '1h30m' or milliseconds"),
    (_SIZE_KEYS, _parse_size, "a non-negative size like '200M', '100K' or a number of bytes"),
    ((FLUSH_THRESHOLD_VARIANCE_FRACTION,), _parse_variance, "a number from 0 to 0.5"),
    ((FLUSH_AUTOTUNE_INITIAL_ROWS,), _parse_count, _COUNT),
)


def _flush_value(
    values: Mapping[str, str],
    keys: tuple[str, ...],
    parse: Callable[[str], Any],
    what: str,
    label: str,
    problems: list[str],
) -> Any:
    """Validate every present key of `keys`; return the parsed value of the first present one."""
    result = None
    for key in keys:
        if key not in values:
            continue
        parsed = parse(values[key])
        if parsed is None:
            problems.append(f"{label}: '{key}' must be {what}, got '{values[key]}'")
        elif result is None:
            result = parsed
    return result


def _check_offset_reset(
    values: Mapping[str, str], key: str, label: str, problems: list[str]
) -> None:
    offset = values.get(key)
    if offset is not None and not (
        offset.lower() in ("smallest", "largest") or _is_offset_period(offset)
        or is_timestamp(offset)
    ):  # fmt: skip
        problems.append(
            f"{label}: offset reset must be smallest, largest, a period like '2d' or an "
            f"ISO-8601 timestamp, got '{offset}'"
        )


def _check_stream_map(raw: object, label: str, problems: list[str]) -> _StreamSummary | None:
    """Check one stream config; return (streamType, topic, flush parameters) when readable."""
    if not isinstance(raw, dict):
        problems.append(f"{label} must be a JSON object")
        return None
    values: dict[str, str] = {}
    for key, value in raw.items():
        text = stream_value(value)
        if text is None:
            problems.append(f"{label}: '{key}' must be a string, number or boolean")
        else:
            values[str(key)] = text
    stream_type = values.get(STREAM_TYPE) or None
    topic = None
    if stream_type is None:
        problems.append(f"{label} has no streamType")
    else:
        topic_key = f"stream.{stream_type}.{TOPIC}"
        topic = values.get(topic_key) or None
        if topic is None:
            problems.append(f"{label} has no '{topic_key}'")
        _check_offset_reset(values, f"stream.{stream_type}.{OFFSET_RESET}", label, problems)
    rows, segment_rows, time_ms, size, variance, _ = (
        _flush_value(values, keys, parse, what, label, problems)
        for keys, parse, what in _FLUSH_CHECKS
    )
    chosen = [v for v in (rows, segment_rows, size) if v]
    if len(chosen) > 1:
        problems.append(
            f"{label}: only one of flush threshold rows ({rows}), segment rows ({segment_rows}) "
            f"and segment size ({size}) can be set"
        )
    flush = (rows, segment_rows, time_ms or DEFAULT_FLUSH_THRESHOLD_TIME_MS, size, variance or 0.0)
    return stream_type, topic, flush


def _check_locations(
    ingestion: Mapping[str, Any], index_config: Mapping[str, Any], problems: list[str]
) -> None:
    """Shapes of the containers and the pauseless flag; exactly one place holds stream configs."""
    stream_ingestion = ingestion.get(STREAM_INGESTION)
    if stream_ingestion is not None and not isinstance(stream_ingestion, dict):
        problems.append("ingestionConfig.streamIngestionConfig must be a JSON object")
    sic = stream_ingestion if isinstance(stream_ingestion, dict) else {}
    maps = sic.get(STREAM_CONFIG_MAPS)
    if maps is not None and not isinstance(maps, list):
        problems.append("ingestionConfig.streamIngestionConfig.streamConfigMaps must be a list")
    legacy = index_config.get(LEGACY_STREAM_CONFIGS)
    if legacy is not None and not isinstance(legacy, dict):
        problems.append("tableIndexConfig.streamConfigs must be a JSON object")
    if not is_flag(sic.get(PAUSELESS)):
        problems.append("streamIngestionConfig.pauselessConsumptionEnabled must be true or false")
    recovery = _disaster_recovery_problem(sic.get(DISASTER_RECOVERY_MODE))
    if recovery:
        problems.append(recovery)

    if isinstance(stream_ingestion, dict) and isinstance(legacy, dict) and legacy:
        problems.append(
            "Stream configs must be given either in ingestionConfig.streamIngestionConfig."
            "streamConfigMaps or in the legacy tableIndexConfig.streamConfigs, not both"
        )
    elif not raw_stream_maps(ingestion, index_config):
        problems.append(
            "A REALTIME table must have at least one stream config "
            "(ingestionConfig.streamIngestionConfig.streamConfigMaps)"
        )


def _check_consistency(
    checked: list[_StreamSummary | None], pauseless: bool, is_upsert: bool, problems: list[str]
) -> None:
    """The rules for a table with several stream configs."""
    if pauseless:
        problems.append(
            "Multiple stream configs are not supported with pauseless consumption enabled"
        )
    if is_upsert:
        problems.append("Multiple stream configs are not supported for upsert table")
    readable = [entry for entry in checked if entry is not None]
    types = sorted({str(entry[0]) for entry in readable if entry[0]})
    if len(types) > 1:
        found = ", ".join(f"'{t}'" for t in types)
        problems.append(f"All stream configs must have the same streamType, found {found}")
    if len({entry[2] for entry in readable}) > 1:
        problems.append("Segment flush parameters must be consistent across all stream configs")
    topics = [entry[1] for entry in readable if entry[1]]
    for topic in sorted({t for t in topics if topics.count(t) > 1}):
        problems.append(f"Topic '{topic}' appears in more than one stream config")


def check_streams(
    ingestion: Mapping[str, Any], index_config: Mapping[str, Any], *, is_upsert: bool
) -> list[str]:
    """Every problem of a REALTIME table's stream configs (empty when they are valid).

    `ingestion` and `index_config` are the `ingestionConfig` and `tableIndexConfig` sections;
    `is_upsert` whether the table is an upsert table (several stream configs are refused then).
    """
    problems: list[str] = []
    _check_locations(ingestion, index_config, problems)
    raw_maps = raw_stream_maps(ingestion, index_config)
    checked = [
        _check_stream_map(raw, f"stream config #{index}", problems)
        for index, raw in enumerate(raw_maps, start=1)
    ]
    if len(raw_maps) > 1:
        _check_consistency(checked, pauseless_enabled(ingestion), is_upsert, problems)
    return problems
