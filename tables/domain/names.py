"""Table and segment names (reference §1.1, §2.3, §2.4).

Contract:
- Table names with type are `<raw>_REALTIME` / `<raw>_OFFLINE`; `table_name_with_type` is idempotent
  and refuses a name that carries the other type's suffix.
- LLC segment names are `<raw>__<partitionGroupId>__<sequenceNumber>__<yyyyMMdd'T'HHmm'Z'>` with the
  creation time in UTC at minute resolution (1465508537069 -> `myTable__0__1__20160609T2142Z`).
  Parsing follows Pinot's `LLCSegmentName.of`: the name is split on the whole separator `__` the
  way commons-lang `splitByWholeSeparator` does it (leading and repeated separators produce no
  token, the text after the last separator is always a token, even when empty), there must be
  exactly 4 tokens and tokens 2 and 3 must be Java ints; anything else gives None. A parsed name
  keeps its original text: `str()` returns it unchanged, and equality is on that text, as in Pinot.
- Uploaded realtime names are `<prefix>__<raw>__<partitionId>__<creationTime>__<suffix>`; the
  creation time is not validated, so both `20240530T0000Z` and raw epoch millis parse.
- Nothing here reads the clock: callers pass `now_ms` (epoch milliseconds).

Names from outside (REST paths, bodies, query parameters) are checked here, once, against every
place they go: ZooKeeper znode names, deep-store keys, the servers' directories and file names, URLs
and Pinot's own rules (a table name has no '.', no whitespace, no `__`). The rules:
- table and schema names use only ASCII letters, digits, `_` and `-` (`NAME_CHARACTERS`), and start
  with a letter or digit: no `/`, `.`, `..`, NUL, control character, whitespace, `%` (a
  percent-encoded name is refused, never decoded twice) or non-ASCII letter. A leading letter or
  digit also keeps a table's deep-store folder `<raw>/` apart from the store's own `_staging/`;
- a raw table name is at most `MAX_RAW_TABLE_NAME_LENGTH` (137) characters: the longest file name
  the code makes from it must fit the file systems' 255-byte limit. That file is the committer's
  staged rows in the deep store while they are published: `<segment>.<uuid>.parquet.tmp-<uuid>`, 78
  characters past the segment name, itself at most 40 characters past the raw name
  (`__<int32>__<int32>__yyyyMMddTHHmmZ`); 255 - 78 - 40 = 137. Other names are shorter:
  `<segment>.tar.gz.tmp-<uuid>` (+44), `<segment>.tmp.<uuid>.tmp-<uuid>` (+74), a server's
  `<segment>.tar.gz.part-<uuid>` (+45), the folders `<raw>_REALTIME` (+9);
- schema names follow the same rules and length (a table's schema defaults to its raw name);
- segment names in a request also allow `.` inside (not first), and are at most
  `MAX_SEGMENT_NAME_LENGTH` (177) characters, so that every file made from them fits.
`table_name_problem`, `schema_name_problem` and `segment_name_problem` return the rule a name
breaks (None when it is fine); `check_*` raise `InvalidName` with it.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

__all__ = [
    "MAX_RAW_TABLE_NAME_LENGTH",
    "MAX_SCHEMA_NAME_LENGTH",
    "MAX_SEGMENT_NAME_LENGTH",
    "NAME_CHARACTERS",
    "OFFLINE",
    "REALTIME",
    "SEPARATOR",
    "InvalidName",
    "LLCSegmentName",
    "UploadedRealtimeSegmentName",
    "check_schema_name",
    "check_segment_name",
    "check_table_name",
    "format_creation_time",
    "is_llc_segment_name",
    "is_uploaded_realtime_segment_name",
    "parse_creation_time",
    "raw_table_name",
    "schema_name_problem",
    "segment_name_problem",
    "split_by_whole_separator",
    "table_name_problem",
    "table_name_with_type",
    "table_type_of",
]

REALTIME = "REALTIME"
OFFLINE = "OFFLINE"
SEPARATOR = "__"

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CREATION_TIME = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})Z", re.ASCII)
_JAVA_INT = re.compile(r"[+-]?\d+")


class InvalidName(ValueError):
    """A table or segment name that Pinot would refuse."""


# --- table names ----------------------------------------------------------------------------------


def _suffix(table_type: str) -> str:
    return f"_{table_type}"


def table_type_of(name: str) -> str | None:
    """REALTIME or OFFLINE when `name` carries that suffix, else None."""
    for table_type in (REALTIME, OFFLINE):
        if name.endswith(_suffix(table_type)):
            return table_type
    return None


def raw_table_name(name: str) -> str:
    """`name` without its `_REALTIME` / `_OFFLINE` suffix (unchanged when it has none)."""
    table_type = table_type_of(name)
    return name[: -len(_suffix(table_type))] if table_type else name


def table_name_with_type(name: str, table_type: str = REALTIME) -> str:
    """`<raw>_<TYPE>`; a name already carrying that suffix is returned unchanged."""
    if table_type not in (REALTIME, OFFLINE):
        raise InvalidName(f"table type must be {REALTIME} or {OFFLINE}, not {table_type!r}")
    found = table_type_of(name)
    if found == table_type:
        raw = raw_table_name(name)
    elif found is not None:
        raise InvalidName(f"table {name!r} is an {found} table name, not {table_type}")
    else:
        raw = name
    if not raw:
        raise InvalidName("table name must not be empty")
    return raw + _suffix(table_type)


# --- names from outside (see the module docstring) -----------------------------------------------

NAME_CHARACTERS = "ASCII letters, digits, '_' and '-'"
MAX_FILE_NAME_BYTES = 255
_UUID_HEX = 32  # uuid4().hex, in temporary and staged file names
# `__<partition>__<sequence>__yyyyMMddTHHmmZ`: two Java ints of up to 10 digits, then the time.
LLC_SUFFIX_LENGTH = 3 * len(SEPARATOR) + 10 + 10 + len("yyyyMMddTHHmmZ")
# The longest file name made from a segment name: a committer's staged rows while they are being
# published to the deep store, `<segment>.<uuid>.parquet.tmp-<uuid>` (tables.server.committer,
# DeepStore.staging_key and DeepStore.publish).
LONGEST_SEGMENT_FILE_SUFFIX = 1 + _UUID_HEX + len(".parquet") + len(".tmp-") + _UUID_HEX
MAX_SEGMENT_NAME_LENGTH = MAX_FILE_NAME_BYTES - LONGEST_SEGMENT_FILE_SUFFIX
MAX_RAW_TABLE_NAME_LENGTH = MAX_SEGMENT_NAME_LENGTH - LLC_SUFFIX_LENGTH
MAX_SCHEMA_NAME_LENGTH = MAX_RAW_TABLE_NAME_LENGTH

_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
_SHOWN = 40  # characters of a refused name quoted in the message


def _show(name: str) -> str:
    return repr(name if len(name) <= _SHOWN else name[:_SHOWN] + "...")


def _describe(char: str) -> str:
    if char.isspace():
        return f"whitespace {char!r}"
    if not char.isprintable():
        return f"the control character {char!r}"
    if not char.isascii():
        return f"the non-ASCII character {char!r}"
    if char == "%":
        return "the character '%' (a percent-encoded name is not decoded again)"
    return f"the character {char!r}"


def _name_problem(what: str, name: object, max_length: int, extra: str = "") -> str | None:
    """The first rule `name` breaks: non-empty string, charset, first character, length."""
    if not isinstance(name, str) or not name:
        return f"{what} must be a non-empty string"
    allowed = _NAME_CHARS | frozenset(extra)
    for position, char in enumerate(name):
        if char not in allowed:
            others = f", {', '.join(repr(c) for c in extra)}" if extra else ""
            return (
                f"{what} {_show(name)} has {_describe(char)} at position {position}: "
                f"only {NAME_CHARACTERS}{others} are allowed"
            )
    if not (name[0].isascii() and name[0].isalnum()):
        return f"{what} {_show(name)} must start with an ASCII letter or digit"
    if len(name) > max_length:
        return (
            f"{what} {_show(name)} is {len(name)} characters long; at most {max_length} are "
            f"allowed (the files made from it must fit the {MAX_FILE_NAME_BYTES}-byte limit)"
        )
    return None


def table_name_problem(name: object) -> str | None:
    """The rule a table name (raw, or with its `_REALTIME` / `_OFFLINE` suffix) breaks, or None."""
    if not isinstance(name, str) or not name:
        return "table name must be a non-empty string"
    problem = _name_problem("table name", name, max_length=len(name))
    if problem:
        return problem
    table_type = table_type_of(name)
    raw = raw_table_name(name)
    if not raw:
        return f"table name {_show(name)} has nothing before its type suffix"
    for candidate in (name, f"{raw}_{table_type or REALTIME}"):
        if SEPARATOR in candidate:
            return (
                f"table name {_show(candidate)} must not contain {SEPARATOR!r} "
                "(it separates the parts of segment names)"
            )
    return _name_problem("raw table name", raw, MAX_RAW_TABLE_NAME_LENGTH)


def schema_name_problem(name: object) -> str | None:
    """The rule a schema name breaks, or None."""
    return _name_problem("schema name", name, MAX_SCHEMA_NAME_LENGTH)


def segment_name_problem(name: object) -> str | None:
    """The rule a segment name given in a request breaks, or None (`.` allowed, not first)."""
    return _name_problem("segment name", name, MAX_SEGMENT_NAME_LENGTH, extra=".")


def _checked(problem: str | None, name: str) -> str:
    if problem:
        raise InvalidName(problem)
    return name


def check_table_name(name: str) -> str:
    """`name` unchanged, or InvalidName naming the rule it breaks."""
    return _checked(table_name_problem(name), name)


def check_schema_name(name: str) -> str:
    return _checked(schema_name_problem(name), name)


def check_segment_name(name: str) -> str:
    return _checked(segment_name_problem(name), name)


# --- creation time --------------------------------------------------------------------------------


def format_creation_time(now_ms: int) -> str:
    """Epoch milliseconds as `yyyyMMdd'T'HHmm'Z'` in UTC (seconds and millis dropped)."""
    moment = _EPOCH + timedelta(milliseconds=now_ms)
    return (
        f"{moment.year:04d}{moment.month:02d}{moment.day:02d}T{moment.hour:02d}{moment.minute:02d}Z"
    )


def parse_creation_time(text: str) -> int:
    """`yyyyMMdd'T'HHmm'Z'` (UTC) as epoch milliseconds."""
    match = _CREATION_TIME.fullmatch(text)
    if match is None:
        raise InvalidName(f"creation time {text!r} is not of the form yyyyMMddTHHmmZ")
    try:
        moment = datetime(*(int(group) for group in match.groups()), tzinfo=UTC)
    except ValueError as exc:
        raise InvalidName(f"creation time {text!r}: {exc}") from None
    return (moment - _EPOCH) // timedelta(milliseconds=1)


# --- separators -----------------------------------------------------------------------------------


def split_by_whole_separator(text: str, separator: str = SEPARATOR) -> list[str]:
    """commons-lang `StringUtils.splitByWholeSeparator(text, separator)`.

    Separators at the start or next to each other yield no token; the remainder after the last
    separator is always a token (so `"a__"` gives `["a", ""]`); an empty text gives `[]`.
    """
    if not text:
        return []
    tokens: list[str] = []
    start = 0
    while True:
        hit = text.find(separator, start)
        if hit < 0:
            tokens.append(text[start:])
            return tokens
        if hit > start:
            tokens.append(text[start:hit])
        start = hit + len(separator)


def _count_separators(name: str) -> int:
    # str.count scans left to right and does not overlap matches, like Pinot's indexOf loop.
    return name.count(SEPARATOR)


def _java_int(text: str) -> int | None:
    """Integer.parseInt: optional sign, decimal digits, int32 range; None when Java would throw."""
    if _JAVA_INT.fullmatch(text) is None:
        return None
    value = int(text)
    return value if _INT32_MIN <= value <= _INT32_MAX else None


def _parsed_fields(
    name: str, count: int, int_positions: tuple[int, ...]
) -> tuple[str | int, ...] | None:
    """The tokens of `name` with the int positions converted, or None when it does not parse."""
    parts: list[str | int | None] = list(split_by_whole_separator(name))
    if len(parts) != count:
        return None
    for position in int_positions:
        parts[position] = _java_int(str(parts[position]))
        if parts[position] is None:
            return None
    return tuple(parts)


def _check_id(what: str, value: int) -> None:
    if not 0 <= value <= _INT32_MAX:
        raise InvalidName(f"{what} must be between 0 and {_INT32_MAX}, not {value}")


def _check_part(what: str, value: str) -> None:
    if not value.strip():
        raise InvalidName(f"{what} must not be blank")
    if SEPARATOR in value:
        raise InvalidName(f"{what} {value!r} must not contain {SEPARATOR!r}")


# --- LLC segment names ----------------------------------------------------------------------------


def is_llc_segment_name(name: str) -> bool:
    """Pinot's `LLCSegmentName.isLLCSegment`: exactly three `__` separators."""
    return _count_separators(name) == 3


@dataclass(frozen=True, eq=False)
class LLCSegmentName:
    """`<table>__<partition>__<sequence>__<creationTime>` of a consuming (LLC) segment."""

    table_name: str
    partition_group_id: int
    sequence_number: int
    creation_time: str
    # The exact text a parsed name came from (separators may have been collapsed while parsing).
    # Dropped when it does not spell these fields, e.g. after dataclasses.replace.
    original: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        fields = (
            self.table_name,
            self.partition_group_id,
            self.sequence_number,
            self.creation_time,
        )
        if self.original is not None and _parsed_fields(self.original, 4, (1, 2)) != fields:
            object.__setattr__(self, "original", None)

    @classmethod
    def create(
        cls, table_name: str, partition_group_id: int, sequence_number: int, now_ms: int
    ) -> LLCSegmentName:
        """A new name; `table_name` is the raw name (no type suffix)."""
        if not table_name:
            raise InvalidName("table name must not be empty")
        if SEPARATOR in table_name:
            raise InvalidName(f"table name {table_name!r} must not contain {SEPARATOR!r}")
        _check_id("partition group id", partition_group_id)
        _check_id("sequence number", sequence_number)
        return cls(table_name, partition_group_id, sequence_number, format_creation_time(now_ms))

    @classmethod
    def parse(cls, name: str) -> LLCSegmentName | None:
        """Pinot's `LLCSegmentName.of`: the parsed name, or None when `name` is not an LLC name."""
        fields = _parsed_fields(name, 4, (1, 2))
        return None if fields is None else cls(*fields, original=name)

    def __str__(self) -> str:
        if self.original is not None:
            return self.original
        return SEPARATOR.join(
            (
                self.table_name,
                str(self.partition_group_id),
                str(self.sequence_number),
                self.creation_time,
            )
        )

    @property
    def segment_name(self) -> str:
        return str(self)

    @property
    def creation_time_ms(self) -> int:
        return parse_creation_time(self.creation_time)

    @property
    def sort_key(self) -> tuple[int, int]:
        """(partition, sequence): Pinot's order within one table; creation time is ignored."""
        return (self.partition_group_id, self.sequence_number)

    def next(self, now_ms: int) -> LLCSegmentName:
        """The segment that follows this one in its partition, created at `now_ms`."""
        return LLCSegmentName.create(
            self.table_name, self.partition_group_id, self.sequence_number + 1, now_ms
        )

    def _comparable(self, other: object) -> LLCSegmentName:
        if not isinstance(other, LLCSegmentName):
            raise TypeError(f"cannot compare LLCSegmentName with {type(other).__name__}")
        if other.table_name != self.table_name:
            raise ValueError(f"cannot compare segment names of different tables: {self}, {other}")
        return other

    def __lt__(self, other: object) -> bool:
        return self.sort_key < self._comparable(other).sort_key

    def __le__(self, other: object) -> bool:
        return self.sort_key <= self._comparable(other).sort_key

    def __gt__(self, other: object) -> bool:
        return self.sort_key > self._comparable(other).sort_key

    def __ge__(self, other: object) -> bool:
        return self.sort_key >= self._comparable(other).sort_key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LLCSegmentName):
            return NotImplemented
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


# --- uploaded realtime segment names --------------------------------------------------------------


def is_uploaded_realtime_segment_name(name: str) -> bool:
    """Pinot's `UploadedRealtimeSegmentName.isUploadedRealtimeSegmentName`: exactly four `__`."""
    return _count_separators(name) == 4


@dataclass(frozen=True, eq=False)
class UploadedRealtimeSegmentName:
    """`<prefix>__<table>__<partitionId>__<creationTime>__<suffix>` of a segment uploaded to a
    realtime table. Ordered by plain string comparison within one table."""

    prefix: str
    table_name: str
    partition_id: int
    creation_time: str
    suffix: str
    original: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        fields = (self.prefix, self.table_name, self.partition_id, self.creation_time, self.suffix)
        if self.original is not None and _parsed_fields(self.original, 5, (2,)) != fields:
            object.__setattr__(self, "original", None)

    @classmethod
    def create(
        cls, table_name: str, partition_id: int, now_ms: int, prefix: str, suffix: str
    ) -> UploadedRealtimeSegmentName:
        for what, value in (("table name", table_name), ("prefix", prefix), ("suffix", suffix)):
            _check_part(what, value)
        return cls(prefix, table_name, partition_id, format_creation_time(now_ms), suffix)

    @classmethod
    def parse(cls, name: str) -> UploadedRealtimeSegmentName | None:
        fields = _parsed_fields(name, 5, (2,))
        return None if fields is None else cls(*fields, original=name)

    def __str__(self) -> str:
        if self.original is not None:
            return self.original
        return SEPARATOR.join(
            (self.prefix, self.table_name, str(self.partition_id), self.creation_time, self.suffix)
        )

    @property
    def segment_name(self) -> str:
        return str(self)

    def _comparable(self, other: object) -> str:
        if not isinstance(other, UploadedRealtimeSegmentName):
            raise TypeError(f"cannot compare UploadedRealtimeSegmentName with {type(other)}")
        if other.table_name != self.table_name:
            raise ValueError(f"cannot compare segment names of different tables: {self}, {other}")
        return str(other)

    def __lt__(self, other: object) -> bool:
        return str(self) < self._comparable(other)

    def __le__(self, other: object) -> bool:
        return str(self) <= self._comparable(other)

    def __gt__(self, other: object) -> bool:
        return str(self) > self._comparable(other)

    def __ge__(self, other: object) -> bool:
        return str(self) >= self._comparable(other)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UploadedRealtimeSegmentName):
            return NotImplemented
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))
