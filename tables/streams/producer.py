"""Rows for a topic: read from a file or generated from a Pinot schema, keyed, partitioned, paced.

Keys. Each produced row carries a key field (default `__key`) so that a ledger check can prove that
every row was committed exactly once. A row that already has a non-null value in that field keeps
it; every other row gets `first_key` plus its row number in the run (increasing and unique). The
produce command starts `first_key` at the number of messages the topic has ever received, so keys
stay unique across successive runs into one topic (one producer at a time). The partition is
`zlib.crc32(key) % partitions`, with the key as text (strings as they are, other JSON values as
compact JSON), so it is stable across runs and machines.

Files. `read_rows` accepts a JSON array of objects, or a sequence of JSON objects separated by
whitespace (JSON lines; Pinot's example `githubEvents_*.json` is JSON lines despite its name).
Rows are replayed as written: in file order, once, and with their original text, so numbers such
as `1500.00` and the key order reach the stream unchanged; a key field, when added, is spliced in
front of the row's other fields.

Schemas. `synthetic_rows` makes one value per field spec per data type. The time columns
(`dateTimeFieldSpecs`, legacy `timeFieldSpec`) get the current time in the column's format: EPOCH
in any unit and size (`1:MILLISECONDS:EPOCH`, `EPOCH|MILLISECONDS`, `1:DAYS:EPOCH`), TIMESTAMP as
epoch millis, SIMPLE_DATE_FORMAT with the common Java pattern letters (in UTC); any other format
falls back to epoch millis.

Pacing. `Producer.run` sends row k (counting from 0) no earlier than `k / rate` seconds after it
starts, in batches of at most `batch_size` rows, sleeping until the next row is due; `rate` 0 sends
batches as fast as Redis takes them. Clock, sleep and wall time are injected so tests need no real
waiting. `stats` counts only rows whose batch was acknowledged.

Outages. A batch that meets `StreamUnavailable` (Redis stalled, restarting, loading) is sent again
with capped exponential back-off (at most `retry_cap_s` between tries; forever unless
`give_up_after_s`), under one batch id, so a retry never writes its rows twice; one warning per
minute says so. Any other error (a deleted topic) ends the run.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tables.domain.backoff import Backoff, LogThrottle
from tables.streams.base import StreamUnavailable, TopicAdmin

__all__ = [
    "DEFAULT_KEY_FIELD",
    "ProduceStats",
    "Producer",
    "SourceRow",
    "keyed_value",
    "partition_for_key",
    "read_rows",
    "synthetic_rows",
    "time_value",
]

log = logging.getLogger(__name__)

DEFAULT_KEY_FIELD = "__key"
DEFAULT_BATCH_SIZE = 500
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class SourceRow:
    """A row's fields, and its exact text when it came from a file."""

    fields: Mapping[str, Any]
    text: str | None = None


# --- files -----------------------------------------------------------------------------------


def read_rows(path: Path | str) -> Iterator[SourceRow]:
    """The rows of a JSON-array or JSON-lines file, in file order; ValueError names the line."""
    path = Path(path)
    text = path.read_text(encoding="utf-8-sig")
    pos = _WHITESPACE.match(text, 0).end()
    values = _array_items(text, pos + 1) if text.startswith("[", pos) else _sequence(text, pos)
    try:
        for value, start, end in values:
            if not isinstance(value, dict):
                line = text.count("\n", 0, start) + 1
                found = type(value).__name__
                raise ValueError(f"line {line}: expected a JSON object, found {found}")
            yield SourceRow(value, text[start:end])
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _decode(text: str, pos: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        start_line = text.count("\n", 0, pos) + 1
        if start_line != exc.lineno:
            where = f"line {start_line} (the row starting there; {where})"
        raise ValueError(f"{where}: {exc.msg}") from None


def _sequence(text: str, pos: int) -> Iterator[tuple[Any, int, int]]:
    while pos < len(text):
        value, end = _decode(text, pos)
        yield value, pos, end
        pos = _WHITESPACE.match(text, end).end()


def _array_items(text: str, pos: int) -> Iterator[tuple[Any, int, int]]:
    pos = _WHITESPACE.match(text, pos).end()
    if text.startswith("]", pos):
        return
    while True:
        value, end = _decode(text, pos)
        yield value, pos, end
        pos = _WHITESPACE.match(text, end).end()
        if text.startswith("]", pos):
            return
        if not text.startswith(",", pos):
            line = text.count("\n", 0, pos) + 1
            raise ValueError(f"line {line}: expected ',' or ']' in the JSON array")
        pos = _WHITESPACE.match(text, pos + 1).end()


# --- keys and values -------------------------------------------------------------------------


def partition_for_key(key: Any, partitions: int) -> int:
    """`crc32(key as text) % partitions`: stable across runs and machines."""
    text = key if isinstance(key, str) else json.dumps(key, separators=(",", ":"))
    return zlib.crc32(text.encode("utf-8")) % partitions


def _dumps(fields: Mapping[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def keyed_value(row: SourceRow, key_field: str, next_key: int) -> tuple[Any, bytes]:
    """(key, message bytes): the row's own key if it has one, else `next_key` added to it."""
    key = row.fields.get(key_field)
    if key is not None:
        return key, (row.text if row.text is not None else _dumps(row.fields)).encode("utf-8")
    if row.text is not None and key_field not in row.fields:
        body = row.text[row.text.index("{") + 1 :]
        separator = "" if body.lstrip().startswith("}") else ","
        text = "{" + json.dumps(key_field) + ":" + str(next_key) + separator + body
    else:
        rest = {name: value for name, value in row.fields.items() if name != key_field}
        text = _dumps({key_field: next_key, **rest})
    return next_key, text.encode("utf-8")


# --- schemas ---------------------------------------------------------------------------------

_UNIT_NANOS = {
    "NANOSECONDS": 1,
    "MICROSECONDS": 1_000,
    "MILLISECONDS": 1_000_000,
    "SECONDS": 1_000_000_000,
    "MINUTES": 60_000_000_000,
    "HOURS": 3_600_000_000_000,
    "DAYS": 86_400_000_000_000,
}
_JAVA_TOKEN = re.compile(r"'(?:[^']|'')*'|([A-Za-z])\1*|[^A-Za-z']+")


def _java_date(pattern: str, moment: datetime) -> str | None:
    """`moment` formatted with a Java/Joda date pattern; None for letters not handled."""
    parts = []
    for match in _JAVA_TOKEN.finditer(pattern):
        token = match.group(0)
        letter, size = token[0], len(token)
        if letter == "'":
            parts.append(token[1:-1].replace("''", "'") if size > 2 else "'")
        elif not letter.isalpha():
            parts.append(token)
        else:
            value = _java_field(letter, size, moment)
            if value is None:
                return None
            parts.append(value)
    return "".join(parts)


def _java_field(letter: str, size: int, moment: datetime) -> str | None:
    numbers = {
        "y": moment.year % 100 if size == 2 else moment.year,
        "M": moment.month,
        "d": moment.day,
        "H": moment.hour,
        "h": moment.hour % 12 or 12,
        "m": moment.minute,
        "s": moment.second,
        "S": moment.microsecond // 1000,
    }
    if letter == "M" and size >= 3:
        return moment.strftime("%b" if size == 3 else "%B")
    if letter in numbers:
        return str(numbers[letter]).zfill(size)
    texts = {
        "E": moment.strftime("%a" if size <= 3 else "%A"),
        "a": moment.strftime("%p"),
        "Z": "+00:00" if size == 2 else "+0000",
        "X": "Z",
        "z": "UTC",
    }
    return texts.get(letter)


def _parse_format(fmt: str) -> tuple[str, str, int, str]:
    """(kind, unit, size, pattern) of a DateTimeFormatSpec in the colon or the pipe form."""
    if "|" in fmt:  # EPOCH|<unit>[|<size>], SIMPLE_DATE_FORMAT|<pattern>[|<tz>], TIMESTAMP
        kind, *rest = fmt.split("|")
        if kind.strip().upper() == "EPOCH":
            unit, size, pattern = (rest[0] if rest else "MILLISECONDS"), rest[1:2], ""
        else:
            unit, size, pattern = "", [], (rest[0] if rest else "")
        size_text = size[0] if size else "1"
    else:  # <size>:<unit>:EPOCH|TIMESTAMP|SIMPLE_DATE_FORMAT[:<pattern>]
        pieces = fmt.split(":", 3)
        size_text, unit, kind = [*pieces, "", "", ""][:3]
        pattern = pieces[3] if len(pieces) > 3 else ""
    size_value = max(1, int(size_text)) if size_text.strip().isdigit() else 1
    return kind.strip().upper(), unit.strip().upper(), size_value, pattern


def time_value(data_type: str, fmt: str, now_ms: int) -> Any:
    """The time `now_ms` in a Pinot DateTimeFormatSpec; epoch millis for formats not handled."""
    kind, unit, size, pattern = _parse_format(fmt)
    value: Any = now_ms
    if kind == "EPOCH" and unit in _UNIT_NANOS:
        value = now_ms * 1_000_000 // (_UNIT_NANOS[unit] * size)
    elif kind == "SIMPLE_DATE_FORMAT" and pattern:
        formatted = _java_date(pattern, datetime.fromtimestamp(now_ms / 1000, tz=UTC))
        value = now_ms if formatted is None else formatted
    return str(value) if data_type.upper() == "STRING" else value


_GENERATORS: dict[str, Callable[[random.Random, str, int], Any]] = {
    "INT": lambda rng, name, now: rng.randint(0, 100_000),
    "LONG": lambda rng, name, now: rng.randint(0, 10**12),
    "FLOAT": lambda rng, name, now: round(rng.uniform(0, 1000), 2),
    "DOUBLE": lambda rng, name, now: round(rng.uniform(0, 1000), 6),
    "BIG_DECIMAL": lambda rng, name, now: f"{rng.randint(0, 10**6)}.{rng.randint(0, 99):02d}",
    "BOOLEAN": lambda rng, name, now: rng.random() < 0.5,
    "TIMESTAMP": lambda rng, name, now: now,
    "STRING": lambda rng, name, now: f"{name}-{rng.randint(0, 99)}",
    "JSON": lambda rng, name, now: {"id": rng.randint(0, 999), "tag": f"t{rng.randint(0, 9)}"},
    "BYTES": lambda rng, name, now: rng.randbytes(4).hex(),  # Pinot reads BYTES as hex in JSON
}


def _generator(data_type: str, name: str) -> Callable[[random.Random, str, int], Any]:
    try:
        return _GENERATORS[data_type.upper()]
    except KeyError:
        raise ValueError(f"field {name!r} has data type {data_type!r}, not supported") from None


def _time_specs(schema: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    specs = [
        (spec["name"], spec.get("dataType", "LONG"), spec.get("format", ""))
        for spec in schema.get("dateTimeFieldSpecs") or []
    ]
    legacy = (schema.get("timeFieldSpec") or {}).get("incomingGranularitySpec")
    if legacy:
        fmt = f"{legacy.get('timeUnitSize', 1)}:{legacy.get('timeType', 'MILLISECONDS')}:"
        fmt += legacy.get("timeFormat", "EPOCH")
        specs.append((legacy["name"], legacy.get("dataType", "LONG"), fmt))
    return specs


def synthetic_rows(
    schema: Mapping[str, Any],
    now_ms: Callable[[], int],
    rng: random.Random | None = None,
    skip: Iterable[str] = (),
) -> Iterator[SourceRow]:
    """Endless rows for a Pinot schema; the fields in `skip` are left out (the key, for one),
    and so are the fields the ingestion derives (a field spec with a `transformFunction`)."""
    rng = rng or random.Random()
    skipped = set(skip)
    skipped.update(
        spec["name"]
        for kind in ("dimensionFieldSpecs", "metricFieldSpecs", "dateTimeFieldSpecs")
        for spec in schema.get(kind) or []
        if spec.get("transformFunction")
    )
    plain = [
        (spec["name"], _generator(spec.get("dataType", "STRING"), spec["name"]), spec)
        for kind in ("dimensionFieldSpecs", "metricFieldSpecs")
        for spec in schema.get(kind) or []
        if spec["name"] not in skipped
    ]
    times = [spec for spec in _time_specs(schema) if spec[0] not in skipped]
    return _generate(plain, times, now_ms, rng)  # a bad schema fails here, not at the first row


def _generate(
    plain: list[tuple[str, Callable[[random.Random, str, int], Any], Mapping[str, Any]]],
    times: list[tuple[str, str, str]],
    now_ms: Callable[[], int],
    rng: random.Random,
) -> Iterator[SourceRow]:
    while True:
        now = now_ms()
        row: dict[str, Any] = {}
        for name, generate, spec in plain:
            if spec.get("singleValueField", True):
                row[name] = generate(rng, name, now)
            else:
                row[name] = [generate(rng, name, now) for _ in range(rng.randint(1, 3))]
        for name, data_type, fmt in times:
            row[name] = time_value(data_type, fmt, now)
        yield SourceRow(row)


# --- the producer ----------------------------------------------------------------------------


@dataclass
class ProduceStats:
    started: float
    rows: int = 0
    per_partition: Counter[int] = field(default_factory=Counter)  # rows we wrote
    next_offsets: dict[int, int] = field(default_factory=dict)  # past the last offset we wrote

    def rows_per_second(self, now: float) -> float:
        elapsed = now - self.started
        return self.rows / elapsed if elapsed > 0 else 0.0


class Producer:
    """Sends keyed rows to a topic at a target rate (see the module docstring)."""

    def __init__(
        self,
        admin: TopicAdmin,
        topic: str,
        partitions: int,
        *,
        rate: float = 0,
        count: int | None = None,
        key_field: str = DEFAULT_KEY_FIELD,
        batch_size: int = DEFAULT_BATCH_SIZE,
        first_key: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        on_progress: Callable[[ProduceStats], None] | None = None,
        progress_interval: float = 1.0,
        retry_cap_s: float = 5.0,
        give_up_after_s: float | None = None,
    ) -> None:
        if partitions < 1 or rate < 0 or batch_size < 1 or (count is not None and count < 0):
            raise ValueError("partitions and batch_size must be >= 1, rate and count >= 0")
        self.admin, self.topic, self.partitions = admin, topic, partitions
        self.rate, self.count, self.key_field, self.batch_size = rate, count, key_field, batch_size
        self.first_key = first_key
        self._clock, self._sleep, self._wall_ms = clock, sleep, wall_ms
        self._on_progress, self._progress_interval = on_progress, progress_interval
        self.retry_cap_s, self.give_up_after_s = retry_cap_s, give_up_after_s
        self._throttle = LogThrottle(every_s=60.0)
        self.stats = ProduceStats(started=clock())

    def run(self, rows: Iterable[SourceRow | Mapping[str, Any]]) -> ProduceStats:
        """Produce rows until `count` is reached or the rows run out; returns the stats."""
        source = iter(rows)
        self.stats = ProduceStats(started=self._clock())
        last_progress = self.stats.started
        while self.count is None or self.stats.rows < self.count:
            allowed = self._rows_due()
            if allowed <= 0:
                wait = self.stats.started + self.stats.rows / self.rate - self._clock()
                if wait > 0:
                    self._sleep(wait)
                    continue
                allowed = 1  # due after all (rounding): never spin without sending
            if self.count is not None:
                allowed = min(allowed, self.count - self.stats.rows)
            if not self._send(source, allowed):
                break
            now = self._clock()
            if self._on_progress is not None and now - last_progress >= self._progress_interval:
                last_progress = now
                self._on_progress(self.stats)
        return self.stats

    def _rows_due(self) -> int:
        """How many rows may go now: all of a batch at rate 0, else those already due."""
        if self.rate == 0:
            return self.batch_size
        elapsed = self._clock() - self.stats.started
        due = int(elapsed * self.rate + 1e-9) + 1  # row k is due at k / rate
        return min(due - self.stats.rows, self.batch_size)

    def _send(self, source: Iterator[SourceRow | Mapping[str, Any]], limit: int) -> int:
        batches: dict[int, list[bytes]] = {}
        taken = 0
        for row in source:
            if not isinstance(row, SourceRow):
                row = SourceRow(row)
            key, value = keyed_value(row, self.key_field, self.first_key + self.stats.rows + taken)
            batches.setdefault(partition_for_key(key, self.partitions), []).append(value)
            taken += 1
            if taken == limit:
                break
        if taken:
            offsets = self._write(batches)
            for partition, written in offsets.items():
                if written:
                    self.stats.per_partition[partition] += len(written)
                    self.stats.next_offsets[partition] = written[-1] + 1
            self.stats.rows += taken
        return taken

    def _write(self, batches: dict[int, list[bytes]]) -> dict[int, list[int]]:
        """One batch, retried through stream outages with capped back-off. The batch id makes a
        retry idempotent: rows Redis applied before its reply was lost are not written twice."""
        batch_id = uuid.uuid4().hex
        backoff = Backoff(first=0.2, cap=self.retry_cap_s)
        started = self._clock()
        while True:
            try:
                return self.admin.produce_many(self.topic, batches, self._wall_ms(), batch_id)
            except StreamUnavailable as exc:
                waited = self._clock() - started
                if self.give_up_after_s is not None and waited >= self.give_up_after_s:
                    raise
                write, held = self._throttle.allow("unavailable", self._clock())
                if write:
                    log.warning(
                        "stream unavailable for %.0f s (%s); retrying (%d similar held back)",
                        waited,
                        exc,
                        held,
                    )
                self._sleep(backoff.next_delay())
