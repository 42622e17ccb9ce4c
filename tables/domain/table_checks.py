"""Table-level ingestion checks over a table's flush time (pure, stdlib only; takes `now_ms`).

- `flush_time_ms(text)`: the table's `realtime.segment.flush.threshold.time` in ms (Pinot's
  default, 6 h, when absent or unreadable).
- `never_committed(...)`: the reason a table is flagged, or "": older than `factor` flush times
  (its first segment's creation), no committed segment, and rows arrive. `tables.mirror.sync`
  folds it into the table's health (WARNING, `triage.table_health`); pages and /api/v1 show it as
  a flag.
- `ingestion_problem(...)`: the reason a table's ingestion is down, or "": rows wait upstream and
  no offset moved, or no segment was committed, for `factor` flush times (the /healthz
  ingestion check turns red on any).
"""

from __future__ import annotations

from tables.domain.flush import DEFAULT_FLUSH_THRESHOLD_TIME_MS, parse_period_ms
from tables.domain.triage import format_duration

__all__ = ["FLUSH_FACTOR", "flush_time_ms", "ingestion_problem", "never_committed"]

# A table is flagged when it has not committed for this many flush times while rows arrive.
FLUSH_FACTOR = 2.0


def flush_time_ms(text: str) -> int:
    """A table's flush time (`realtime.segment.flush.threshold.time`) in ms; Pinot's default
    (6 h) when absent or unreadable."""
    try:
        value = parse_period_ms(text) if text else 0
    except ValueError:
        value = 0
    return value if value > 0 else DEFAULT_FLUSH_THRESHOLD_TIME_MS


def never_committed(
    *,
    first_created_ms: int | None,
    committed: bool,
    flush_ms: int,
    rows_arriving: bool,
    now_ms: int,
    factor: float = FLUSH_FACTOR,
) -> str:
    """Why a table that never committed is flagged, or "" when it is not: it is older than
    `factor` flush times (its first segment's creation), has no committed segment, and rows
    arrive (consumed or waiting upstream)."""
    if committed or not rows_arriving or first_created_ms is None:
        return ""
    age = now_ms - first_created_ms
    if age < factor * flush_ms:
        return ""
    return (
        f"no segment committed in {format_duration(age)} while rows arrive "
        f"(flush time {format_duration(flush_ms)})"
    )


def ingestion_problem(
    *,
    rows_waiting: bool,
    last_progress_ms: int | None,
    last_commit_ms: int | None,
    flush_ms: int,
    now_ms: int,
    factor: float = FLUSH_FACTOR,
) -> str:
    """Why a table's ingestion is down, or "": rows wait upstream and nothing was consumed (no
    offset moved) or nothing committed (no new segment) for `factor` flush times."""
    if not rows_waiting:
        return ""
    limit = factor * flush_ms
    findings = []
    if last_progress_ms is not None and now_ms - last_progress_ms >= limit:
        findings.append(f"nothing consumed for {format_duration(now_ms - last_progress_ms)}")
    if last_commit_ms is not None and now_ms - last_commit_ms >= limit:
        findings.append(f"nothing committed for {format_duration(now_ms - last_commit_ms)}")
    if not findings:
        return ""
    flush = format_duration(flush_ms)
    return f"rows wait upstream but {' and '.join(findings)} (flush time {flush})"
