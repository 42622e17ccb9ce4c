"""The exactly-once ledger of a realtime table (ARCHITECTURE §4), checked from its parts. Pure.

Ranges are half-open `[start, end)`, as segments' `startOffset` / `endOffset`. Inputs are gathered
by `tables.ledger`.

`check_ranges(segments, lost)`: every LLC segment as a `SegmentRange` (status and offsets as in
ZooKeeper), and the stream losses already counted (`LostRange`). Per partition, in sequence order;
the *frontier* is the largest end offset of the DONE and COMMITTING segments so far (the first
segment sets it to its start):
- a DONE segment must start at the frontier. Later is a *gap* `[frontier, start)`, excused (a note)
  only by a lost range of that partition equal to it; earlier is an *overlap* with each earlier
  segment it shares offsets with, or *out of order* when it shares none. A DONE segment without a
  valid range (missing, not decimal, end < start) is a problem;
- IN_PROGRESS and COMMITTING segments are *open*: noted, not errors, but they too must start at the
  frontier (a COMMITTING end offset moves it; an IN_PROGRESS segment replaced by a later one at the
  same offset, as Pinot's repair does, is fine);
- two segments with one sequence number are a problem; other statuses (UPLOADED) are noted.

`check_rows(partition, segments, stream, lost)`, per partition: each DONE segment's rows
(`SegmentRows`: offset of each row, its key if the segment stores the key column, or why it could
not be read) against what the stream holds over the span (`StreamRows`: offset -> key, None when a
message has no key field; a key produced twice has two offsets). Problems: a row outside its
segment's range; an offset in two segments or twice in one (duplicated); an offset produced inside
a DONE range that no segment holds (missing), unless lost; a row at an offset not produced yet; a
stored key that differs from the produced one; a key produced at two offsets; a segment that
cannot be read (its range is then not compared) or whose row count differs from `total_docs`.
Rows the stream no longer holds (retention) and unkeyed messages are counted in notes.

Offsets a consumer found gone from the stream while it consumed a segment (the stream trimmed past
its next offset) are declared by the committed segment itself: its `custom.map` holds
`LOST_OFFSETS_KEY` = `format_offset_ranges(...)` ("s-e,s-e", half-open, ascending, disjoint),
the same text the committer sends as the segmentCommitEnd parameter `STREAM_DATA_LOSS_PARAM`.

Rows dropped by the table's filter (`ingestionConfig.filterConfig`, Pinot's realtimeRowsFiltered)
are declared by the segment that would have held them: the file `FILTERED_OFFSETS_FILE` in its
tar ("s-e,s-e" ranges, the format above), read into `SegmentRows.filtered`. They excuse exactly
those offsets of the row check (one note per segment with the count: "dropped by the filter");
a declared offset outside the segment's range, or one the segment also holds a row at, is a
problem (it excuses nothing).

A segment of a table that unnests arrays (`ingestionConfig.complexTypeConfig.fieldsToUnnest`:
one row per element, all at the message's offset) declares it with the file `UNNEST_FILE` in its
tar, read into `SegmentRows.unnested`. Its rows are then counted by offset: several rows at one
offset of that segment are not duplicates (a note with rows and offsets), an offset still needs
at least one row (or a filter or loss excuse), and an offset in two segments is still a
duplicate. `total_docs` is compared with its rows (Pinot counts rows). Every other segment keeps
the strict check: one row per offset.

`LedgerReport.ok` is true exactly when there is no problem. Problems and notes are one line each,
naming partition, segments and offsets; consecutive offsets make one line, and each kind of row
problem is capped at `MAX_LINES_PER_KIND` lines plus a "... more" line. `combine` joins a range
report with the row reports of its partitions.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

__all__ = [
    "FILTERED_OFFSETS_FILE",
    "LOST_OFFSETS_KEY",
    "MAX_LINES_PER_KIND",
    "STREAM_DATA_LOSS_PARAM",
    "UNNEST_FILE",
    "LedgerReport",
    "LostRange",
    "SegmentRange",
    "SegmentRows",
    "StreamRows",
    "check_ranges",
    "check_rows",
    "combine",
    "format_offset_ranges",
    "offset_runs",
    "parse_offset",
    "parse_offset_ranges",
]

MAX_LINES_PER_KIND = 20
LOST_OFFSETS_KEY = "consumption.lostOffsets"  # in a committed segment's custom.map
STREAM_DATA_LOSS_PARAM = "streamDataLoss"  # segmentCommitEnd(WithMetadata) query parameter
FILTERED_OFFSETS_FILE = "filtered.offsets"  # in a segment's tar: the offsets its filter dropped
UNNEST_FILE = "unnest.fields"  # in a segment's tar: it unnests these fields (rows per offset >= 1)
DONE, IN_PROGRESS, COMMITTING = "DONE", "IN_PROGRESS", "COMMITTING"
_OFFSET = re.compile(r"[0-9]+", re.ASCII)


@dataclass(frozen=True)
class SegmentRange:
    """One LLC segment as ZooKeeper describes it (offsets as written: text, int or None)."""

    segment: str
    partition: int
    sequence: int
    status: str
    start_offset: str | int | None
    end_offset: str | int | None


@dataclass(frozen=True)
class LostRange:
    """Offsets `[start, end)` of `partition` the stream dropped before they were consumed."""

    partition: int
    start: int
    end: int
    why: str = "were lost by the stream (counted data loss)"


@dataclass(frozen=True)
class SegmentRows:
    """The rows one DONE segment holds: the offset of each (a multiset), in any order."""

    segment: str
    start_offset: int
    end_offset: int
    offsets: Sequence[int] = ()
    keys: Sequence[str | None] | None = None  # per row, when the segment stores the key column
    total_docs: int | None = None  # what ZooKeeper says the segment holds
    error: str | None = None  # why the rows could not be read
    filtered: Sequence[int] = ()  # offsets the table's filter dropped (declared by the segment)
    unnested: bool = False  # the segment declares fieldsToUnnest: one or more rows per offset


@dataclass(frozen=True)
class StreamRows:
    """What one partition of the stream holds over the span read."""

    keys: Mapping[int, str | None]  # offset -> key of each message (None: no key field)
    first_available: int  # the earliest offset the stream still held
    latest: int  # the offset the next produced message will get


@dataclass
class LedgerReport:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    partitions: int = 0
    segments: int = 0  # DONE segments
    open_segments: int = 0
    rows_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        verdict = "ok" if self.ok else f"FAILED ({_n(len(self.problems), 'problem')})"
        return (
            f"{verdict}: {_n(self.partitions, 'partition')}, "
            f"{_n(self.segments, 'DONE segment')}, {self.open_segments} open, "
            f"{_n(self.rows_checked, 'row')} checked"
        )


def combine(ranges: LedgerReport, rows: Iterable[LedgerReport]) -> LedgerReport:
    """The range report with the problems, notes and row counts of per-partition row reports."""
    out = replace(ranges, problems=list(ranges.problems), notes=list(ranges.notes))
    for report in rows:
        out.problems.extend(report.problems)
        out.notes.extend(report.notes)
        out.rows_checked += report.rows_checked
    return out


# --- helpers -------------------------------------------------------------------------------------


def parse_offset(value: str | int | None) -> int | None:
    """A stream offset as ZooKeeper holds it (decimal text), or None when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if isinstance(value, str) and _OFFSET.fullmatch(value.strip()):
        return int(value)
    return None


def offset_runs(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending distinct offsets as half-open runs of consecutive offsets."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][1] == offset:
            runs[-1] = (runs[-1][0], offset + 1)
        else:
            runs.append((offset, offset + 1))
    return runs


def format_offset_ranges(ranges: Iterable[tuple[int, int]]) -> str:
    """Half-open offset ranges as "s-e,s-e" (the order given)."""
    return ",".join(f"{start}-{end}" for start, end in ranges)


def parse_offset_ranges(text: str) -> list[tuple[int, int]]:
    """The ranges of `format_offset_ranges` text ("" is none). ValueError unless every range is
    `start-end` in decimal with start < end, ascending and disjoint."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(",") if text.strip() else []:
        start_text, dash, end_text = part.strip().partition("-")
        start, end = parse_offset(start_text), parse_offset(end_text)
        if not dash or start is None or end is None or start >= end:
            raise ValueError(f"{part.strip()!r} is not an offset range 'start-end' (start < end)")
        if ranges and start < ranges[-1][1]:
            raise ValueError(f"offset range {part.strip()!r} is not after {ranges[-1]}")
        ranges.append((start, end))
    return ranges


def _n(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def _span(start: int, end: int) -> str:
    return f"[{start}, {end}) ({_n(end - start, 'offset')})"


def _runs(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted distinct offsets as half-open runs of consecutive offsets."""
    runs: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if runs and runs[-1][1] == offset:
            runs[-1] = (runs[-1][0], offset + 1)
        else:
            runs.append((offset, offset + 1))
    return runs


def _keys_text(keys: Sequence[str | None], limit: int = 3) -> str:
    shown = [repr(k) for k in keys[:limit] if k is not None]
    if not shown:
        return ""
    more = f", ... ({len(keys)} in all)" if len(keys) > limit else ""
    return f", keys {', '.join(shown)}{more}"


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LINES_PER_KIND:
        return lines
    rest = len(lines) - MAX_LINES_PER_KIND
    return [*lines[:MAX_LINES_PER_KIND], f"... and {rest} more lines of {what}"]


# --- ranges --------------------------------------------------------------------------------------


def check_ranges(
    segments: Iterable[SegmentRange],
    lost: Iterable[LostRange] = (),
    replayed: Iterable[LostRange] = (),
) -> LedgerReport:
    """The range check of the module docstring, over every partition of `segments`."""
    by_partition: dict[int, list[SegmentRange]] = defaultdict(list)
    for segment in segments:
        by_partition[segment.partition].append(segment)
    lost_by: dict[int, dict[tuple[int, int], str]] = defaultdict(dict)
    for loss in lost:
        lost_by[loss.partition][(loss.start, loss.end)] = loss.why
    replays_by: dict[int, list[LostRange]] = defaultdict(list)
    for replay in replayed:
        replays_by[replay.partition].append(replay)
    report = LedgerReport(partitions=len(by_partition))
    for partition in sorted(by_partition):
        walk = _PartitionWalk(partition, lost_by[partition], report, replays_by[partition])
        for segment in sorted(by_partition[partition], key=lambda s: (s.sequence, s.segment)):
            walk.visit(segment)
    return report


class _PartitionWalk:
    """One partition's segments, visited in sequence order (see the module docstring)."""

    def __init__(
        self,
        partition: int,
        lost: dict[tuple[int, int], str],
        report: LedgerReport,
        replays: list[LostRange] | None = None,
    ) -> None:
        self.where, self.lost, self.report = f"partition {partition}", lost, report
        self.replays = replays or []
        self.frontier: int | None = None
        self.frontier_by = ""  # what sets the frontier, for messages
        self.earlier: list[tuple[str, int, int]] = []  # (segment, start, end), DONE/COMMITTING
        self.sequences: dict[int, str] = {}

    def visit(self, segment: SegmentRange) -> None:
        where, report = self.where, self.report
        name, status = segment.segment, str(segment.status)
        if segment.sequence in self.sequences:
            report.problems.append(
                f"{where}: segments {self.sequences[segment.sequence]} and {name} both have "
                f"sequence number {segment.sequence}"
            )
        self.sequences.setdefault(segment.sequence, name)
        if status not in (DONE, IN_PROGRESS, COMMITTING):
            report.notes.append(f"{where}: {name} is {status}: not part of the stream ledger")
            return
        start, end = parse_offset(segment.start_offset), parse_offset(segment.end_offset)
        if status == DONE:
            report.segments += 1
        else:
            report.open_segments += 1
            if status == IN_PROGRESS or None in (start, end) or end < start:
                end = None  # an open segment needs no end offset
        if start is None or (status == DONE and (end is None or end < start)):
            report.problems.append(
                f"{where}: {status} segment {name} has no valid offset range "
                f"(startOffset={segment.start_offset!r}, endOffset={segment.end_offset!r})"
            )
            return
        label = f"{name} [{start}, {end})" if end is not None else f"{name} (from {start})"
        if status != DONE:
            report.notes.append(f"{where}: open segment {label} is {status}")
        if self.frontier is None:
            self.frontier, self.frontier_by = start, f"{name} starts"
        if start > self.frontier:
            self._gap(start, label)
        elif start < self.frontier:
            self._early_start(status, start, end, label)
        if end is not None:
            self.earlier.append((name, start, end))
            if end >= self.frontier:
                self.frontier, self.frontier_by = end, f"{name} ends"

    def _gap(self, start: int, label: str) -> None:
        frontier = self.frontier
        assert frontier is not None
        if (frontier, start) in self.lost:
            why = self.lost[(frontier, start)]
            self.report.notes.append(
                f"{self.where}: offsets {_span(frontier, start)} before {label} {why}: gap excused"
            )
            return
        near = [f"[{a}, {b})" for a, b in sorted(self.lost) if a < start and frontier < b]
        hint = f" (known lost {', '.join(near)} does not match it exactly)" if near else ""
        self.report.problems.append(
            f"{self.where}: gap: offsets {_span(frontier, start)} are in no segment: "
            f"{self.frontier_by} at {frontier}, {label} starts at {start}{hint}"
        )

    def _early_start(self, status: str, start: int, end: int | None, label: str) -> None:
        frontier, problems = self.frontier, self.report.problems
        assert frontier is not None
        top = frontier if end is None else min(end, frontier)
        for replay in self.replays:
            if replay.start <= start < replay.end and top <= replay.end:
                self.report.notes.append(
                    f"{self.where}: {label} covers offsets {_span(start, top)} again: they "
                    f"{replay.why}: overlap excused"
                )
                return
        if end is None:  # an open segment without an end: it would consume committed offsets
            problems.append(
                f"{self.where}: open segment {label} ({status}) starts at {start}, but "
                f"{self.frontier_by} at {frontier}: offsets {_span(start, frontier)} would be "
                "consumed twice"
            )
            return
        shared = [
            (o, max(start, a), min(end, b)) for o, a, b in self.earlier if a < end and start < b
        ]
        for other, low, high in shared:
            problems.append(
                f"{self.where}: overlap: {label} and {other} both cover offsets {_span(low, high)}"
            )
        if not shared:
            problems.append(
                f"{self.where}: out of order: {label} starts at {start}, before {frontier} where "
                f"{self.frontier_by}, though its sequence number is later"
            )


# --- rows ----------------------------------------------------------------------------------------


class _Covered:
    """Membership in a union of half-open ranges."""

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        merged: list[list[int]] = []
        for start, end in sorted(r for r in ranges if r[0] < r[1]):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._starts = [m[0] for m in merged]
        self._ends = [m[1] for m in merged]

    def __contains__(self, offset: int) -> bool:
        index = bisect.bisect_right(self._starts, offset) - 1
        return index >= 0 and offset < self._ends[index]


def _holders(names: list[str]) -> str:
    counts = sorted(Counter(names).items())
    if len(counts) == 1:
        name, times = counts[0]
        return f"{times} times in segment {name}" if times > 2 else f"twice in segment {name}"
    parts = [name if n == 1 else f"{name} ({n} times)" for name, n in counts]
    return f"in {len(counts)} segments: {', '.join(parts)}"


def _run_lines(prefix: str, offsets: Iterable[int], suffix: str) -> list[str]:
    return [f"{prefix} {_span(a, b)}{suffix}" for a, b in _runs(offsets)]


def check_rows(
    partition: int,
    segments: Sequence[SegmentRows],
    stream: StreamRows,
    lost: Iterable[LostRange] = (),
    replayed: Iterable[LostRange] = (),
) -> LedgerReport:
    """The row check of the module docstring for one partition's DONE segments."""
    where = f"partition {partition}"
    report = LedgerReport(partitions=1, segments=len(segments))
    produced, latest = stream.keys, stream.latest
    holders: dict[int, list[str]] = defaultdict(list)
    unreadable: list[tuple[int, int]] = []
    outside: list[str] = []
    phantom: list[str] = []
    mismatched: list[str] = []
    not_compared = 0
    dropped: list[tuple[int, int]] = []
    for seg in segments:
        start, end = seg.start_offset, seg.end_offset
        span = f"{where}: segment {seg.segment} [{start}, {end})"
        if seg.error is not None:
            report.problems.append(
                f"{span} cannot be read: {seg.error}; its offsets {_span(start, end)} are not "
                "verified"
            )
            unreadable.append((start, end))
            continue
        report.rows_checked += len(seg.offsets)
        if seg.total_docs is not None and seg.total_docs != len(seg.offsets):
            report.problems.append(
                f"{span} holds {len(seg.offsets)} rows, but its ZooKeeper metadata says "
                f"{seg.total_docs}"
            )
        for offset in _held(seg, span, report):
            holders[offset].append(seg.segment)
        dropped += _filtered(seg, span, report)
        outside += _run_lines(
            f"{span} holds rows at offsets",
            (o for o in seg.offsets if not start <= o < end),
            " outside its range",
        )
        phantom += _run_lines(
            f"{span} holds rows at offsets",
            (o for o in seg.offsets if o >= latest),
            f" that were never produced (the partition's next offset is {latest})",
        )
        not_compared += sum(1 for o in seg.offsets if o < latest and o not in produced)
        # Without a stored key column there is nothing to compare (zip over no keys).
        for offset, key in zip(seg.offsets, seg.keys or (), strict=seg.keys is not None):
            expected = produced.get(offset)
            if expected is not None and key != expected:
                mismatched.append(
                    f"{where}: segment {seg.segment} holds key {key!r} at offset {offset}, but "
                    f"the stream has key {expected!r} there"
                )

    done = _Covered((s.start_offset, s.end_offset) for s in segments)
    skipped = _Covered(unreadable)
    excused = _Covered(
        [*((loss.start, loss.end) for loss in lost if loss.partition == partition), *dropped]
    )
    compared = sorted(o for o in produced if o in done and o not in skipped)
    missing_lines = [
        f"{where}: missing rows: offsets {_span(a, b)} were produced but are in no segment"
        + _keys_text([produced[o] for o in range(a, b)])
        for a, b in _runs(o for o in compared if o not in holders and o not in excused)
    ]
    production_lines, unkeyed = _duplicate_production(where, compared, produced)
    replays = _Covered((r.start, r.end) for r in replayed if r.partition == partition)
    twice = [o for o, names in holders.items() if len(names) == 2 and o in replays]
    for offset in twice:  # consumed again on purpose (a resume from smallest): not duplicates
        holders[offset] = holders[offset][:1]
    if twice:
        report.notes.append(
            f"{where}: {_n(len(twice), 'row')} held twice because a resume from smallest "
            "consumed committed offsets again: excused"
        )
    for lines, what in (
        (outside, "rows outside their segment's range"),
        (_duplicates(where, holders, produced), "duplicated rows"),
        (missing_lines, "missing rows"),
        (phantom, "rows never produced"),
        (mismatched, "key mismatches"),
        (production_lines, "duplicate production"),
    ):
        report.problems.extend(_capped(lines, what))
    if not_compared:
        report.notes.append(
            f"{where}: {_n(not_compared, 'segment row')} at offsets the stream no longer holds "
            f"(it starts at {stream.first_available}): not compared"
        )
    if unkeyed:
        report.notes.append(
            f"{where}: {_n(unkeyed, 'produced message')} without a key field: not checked for "
            "duplicate production"
        )
    return report


def _held(seg: SegmentRows, span: str, report: LedgerReport) -> Iterable[int]:
    """The offsets `seg` holds, once per row; once per offset for an unnesting segment (a note
    when some offset holds several rows)."""
    if not seg.unnested:
        return seg.offsets
    distinct = set(seg.offsets)
    if len(distinct) < len(seg.offsets):
        report.notes.append(
            f"{span}: {_n(len(seg.offsets), 'row')} at {_n(len(distinct), 'offset')}: it "
            "unnests arrays (complexTypeConfig.fieldsToUnnest): several rows per offset excused"
        )
    return sorted(distinct)


def _filtered(seg: SegmentRows, span: str, report: LedgerReport) -> list[tuple[int, int]]:
    """The runs of offsets `seg` declares dropped by the filter that excuse (a note), and a
    problem for declared offsets outside its range or that it also holds a row at."""
    if not seg.filtered:
        return []
    held = set(seg.offsets)
    wrong = [o for o in seg.filtered if not seg.start_offset <= o < seg.end_offset or o in held]
    if wrong:
        report.problems.extend(
            _run_lines(
                f"{span} declares offsets",
                wrong,
                " dropped by the filter, but they are outside its range or rows of it: not excused",
            )
        )
    good = [o for o in seg.filtered if o not in set(wrong)]
    if good:
        report.notes.append(
            f"{span}: {_n(len(set(good)), 'row')} dropped by the table's filter "
            "(ingestionConfig.filterConfig): excused"
        )
    return _runs(good)


def _duplicates(
    where: str, holders: Mapping[int, list[str]], produced: Mapping[int, str | None]
) -> list[str]:
    """One line per run of consecutive offsets held by the same several rows."""
    runs: list[tuple[list[int], tuple[str, ...]]] = []
    for offset in sorted(o for o, names in holders.items() if len(names) > 1):
        names = tuple(sorted(holders[offset]))
        if runs and offset == runs[-1][0][-1] + 1 and names == runs[-1][1]:
            runs[-1][0].append(offset)
        else:
            runs.append(([offset], names))
    return [
        f"{where}: duplicated rows: offsets {_span(run[0], run[-1] + 1)} are "
        f"{_holders(list(names))}" + _keys_text([produced.get(o) for o in run])
        for run, names in runs
    ]


def _duplicate_production(
    where: str, offsets: Sequence[int], produced: Mapping[int, str | None]
) -> tuple[list[str], int]:
    """Lines for keys produced at several of `offsets`, and how many had no key."""
    by_key: dict[str, list[int]] = defaultdict(list)
    for offset in offsets:
        if (key := produced[offset]) is not None:
            by_key[key].append(offset)
    unkeyed = len(offsets) - sum(len(found) for found in by_key.values())
    lines = [
        f"{where}: duplicate production: key {key!r} was produced at offsets "
        + ", ".join(str(o) for o in found)
        for key, found in sorted(by_key.items(), key=lambda item: item[1][0])
        if len(found) > 1
    ]
    return lines, unkeyed
