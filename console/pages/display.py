"""How the pages say things: verdict labels, durations, counts, sizes, epoch-millisecond times.

Pure helpers (no database). Templates get numbers already formatted, so no template tag library is
needed; the raw numbers still go into `data-*` attributes for scripts and browser tests.
The verdict vocabulary belongs to `tables.domain.triage`; it is repeated here only as labels, and
an unknown verdict still reads sensibly (`verdict_label` falls back to the word itself).
"""

from __future__ import annotations

import datetime as dt

from tables.domain.triage import format_duration

__all__ = [
    "NONE",
    "VERDICT_HELP",
    "VERDICT_LABELS",
    "count",
    "duration",
    "epoch_ms",
    "millis",
    "rate",
    "size",
    "verdict_label",
]

NONE = "\u2013"  # an en dash: "no value"

VERDICT_LABELS: dict[str, str] = {
    "CONSUMING": "Consuming",
    "LAGGING": "Lagging",
    "STALLED": "Stalled",
    "PAUSED": "Paused",
    "NO_UPSTREAM_DATA": "No upstream data",
    "CONSUMER_ERROR": "Consumer error",
    "MISSING_CONSUMING_SEGMENT": "No CONSUMING segment",
    "OFFSET_UNAVAILABLE": "Offsets lost upstream",
    "NOT_REPORTING": "Not reporting",
    "COMMITTING": "Committing",
    "COMMIT_OVERDUE": "Commit overdue",
    "STARTING": "Starting",
    "UNDER_REPLICATED": "Under-replicated",
}

VERDICT_HELP: dict[str, str] = {
    "CONSUMING": "Replicas consume and keep up.",
    "LAGGING": "Consuming, but behind the stream by more than the threshold.",
    "STALLED": "Behind the stream and no offset has moved for a while.",
    "PAUSED": "Consumption is paused for the table or this partition.",
    "NO_UPSTREAM_DATA": "Caught up; the stream has had no new rows for a while.",
    "CONSUMER_ERROR": "A replica is in ERROR or its consumer stopped outside a commit.",
    "MISSING_CONSUMING_SEGMENT": "No segment of the partition is CONSUMING in the IdealState.",
    "OFFSET_UNAVAILABLE": "The stream dropped offsets before they were consumed.",
    "NOT_REPORTING": "No replica published its live state recently.",
    "COMMITTING": "A segment is being completed; offsets stand still meanwhile.",
    "STARTING": "A new CONSUMING segment (just committed or resumed): servers are picking it up.",
    "COMMIT_OVERDUE": "A segment's completion has run past the completion time limit "
    "(MAX_SEGMENT_COMPLETION_TIME); critical past twice the limit.",
    "UNDER_REPLICATED": "Fewer replicas of the consuming segment are CONSUMING or ONLINE in the "
    "ExternalView than the table's replication.",
}


def verdict_label(verdict: str) -> str:
    """A human label for a triage verdict; unknown verdicts read as their own words."""
    if not verdict:
        return "Unknown"
    return VERDICT_LABELS.get(verdict) or verdict.replace("_", " ").capitalize()


def duration(seconds: float | None) -> str:
    """`45 s`, `3 min 05 s`, `2 h 04 min`, `3 d 02 h`; an en dash for None."""
    if seconds is None:
        return NONE
    return format_duration(int(seconds) * 1000)


def millis(ms: int | None) -> str:
    """A duration given in milliseconds: under a second in ms, else as `duration`."""
    if ms is None:
        return NONE
    if ms < 1000:
        return f"{max(0, ms)} ms"
    return duration(ms / 1000)


def count(value: int | float | None) -> str:
    """An integer with thousands separators; an en dash for None."""
    if value is None:
        return NONE
    return f"{int(value):,}"


def rate(value: float | None) -> str:
    """Rows per second: one decimal under 10, whole numbers above."""
    if value is None:
        return NONE
    if abs(value) < 10:
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def size(num_bytes: int | None) -> str:
    """Bytes in binary units (KiB, MiB, ...)."""
    if num_bytes is None or num_bytes < 0:
        return NONE
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


def epoch_ms(value: int | str | None) -> dt.datetime | None:
    """An aware UTC datetime from epoch milliseconds (int or digit string); None otherwise."""
    if value is None or value == "":
        return None
    try:
        ms = int(value)
    except (TypeError, ValueError):
        return None
    if ms <= 0:
        return None
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None
