"""The files of a segment and their byte-exact, deterministic packing.

A segment is a directory `<segment>/` packed as `<segment>.tar.gz`, holding:
- `data.parquet`: the rows (one Parquet file; see `tables.segments.builder`);
- `metadata.properties`: Java properties text, keys sorted, no date comment, ASCII only
  (`format_properties` escapes exactly like `java.util.Properties.store`: `\\`, `=`, `:`, `#`, `!`,
  tab/newline/return/form feed, spaces in keys and a value's leading space, and every character
  outside printable ASCII as `\\uXXXX` UTF-16 units); `parse_properties` reads any such file back,
  including comments and continuation lines;
- `creation.meta`: 16 bytes, Pinot's layout: big-endian int64 CRC, then big-endian int64 creation
  time in epoch millis.

Determinism. `pack_segment` (a folder's files) and `pack_files` (the same files in memory: the
same bytes) write the directory entry first, then the files in name order, each
with a fixed mtime (the caller's, normally the segment's creation time), uid/gid 0, no user or group
names, mode 0644 (0755 for the directory); the gzip header carries mtime 0 and no file name. Packing
the same files twice gives the same bytes, so a re-run publishes an identical object.

Metadata values (`format_value`) are written in Pinot's stored-type form: TIMESTAMP as epoch millis,
BOOLEAN as 0/1, BYTES as hex, BIG_DECIMAL in plain (non-scientific) notation.
"""

from __future__ import annotations

import datetime as dt
import decimal
import gzip
import io
import re
import struct
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import pyarrow as pa

from tables.segments.parquet_read import read_parquet

__all__ = [
    "CREATION_META",
    "DATA_FILE",
    "METADATA_FILE",
    "format_properties",
    "format_value",
    "pack_creation_meta",
    "pack_files",
    "pack_segment",
    "parse_properties",
    "read_metadata_files",
    "read_segment",
    "read_segment_files",
    "unpack_creation_meta",
]

DATA_FILE = "data.parquet"
METADATA_FILE = "metadata.properties"
CREATION_META = "creation.meta"
_SPECIAL = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATOR = re.compile(r"[=: \t\f]")  # ends a key without escapes


_PRINTABLE = re.compile(r"[ -~]*")  # what `_escape` can do with `str.translate`
_PLAIN_ESCAPES = str.maketrans({"\\": "\\\\", "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"})


def _escape(text: str, is_key: bool) -> str:
    """Java properties escaping; printable ASCII (every key and nearly every value a segment
    writes) by translation, anything else character by character (`_escape_each`)."""
    if not _PRINTABLE.fullmatch(text):
        return _escape_each(text, is_key)
    out = text.translate(_PLAIN_ESCAPES)
    if is_key:
        return out.replace(" ", "\\ ")
    return "\\" + out if out.startswith(" ") else out


def _escape_each(text: str, is_key: bool) -> str:
    out: list[str] = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == " ":
            out.append("\\ " if is_key or index == 0 else " ")
        elif char in _SPECIAL:
            out.append(_SPECIAL[char])
        elif char in "=:#!":
            out.append("\\" + char)
        elif " " < char <= "~":
            out.append(char)
        else:
            data = char.encode("utf-16-be")
            for unit in range(0, len(data), 2):
                out.append(f"\\u{int.from_bytes(data[unit : unit + 2], 'big'):04X}")
    return "".join(out)


def format_properties(properties: Mapping[str, str]) -> str:
    """The properties as Java properties text: one `key=value` line per entry, keys sorted."""
    return "".join(
        f"{_escape(key, True)}={_escape(properties[key], False)}\n" for key in sorted(properties)
    )


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending: str | None = None
    for physical in text.splitlines():
        line = physical.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        part = line[:-1] if continued else line
        pending = part if pending is None else pending + part
        if not continued:
            lines.append(pending)
            pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text  # nothing escaped (the common case: a commit end parses every line)
    out: list[str] = []
    chars = iter(range(len(text)))
    for i in chars:
        char = text[i]
        if char != "\\" or i + 1 >= len(text):
            out.append(char)
            continue
        nxt = text[i + 1]
        next(chars, None)
        if nxt == "u" and i + 6 <= len(text):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            for _ in range(4):
                next(chars, None)
        else:
            out.append(_UNESCAPE.get(nxt, nxt))
    # Surrogate pairs written as two \u escapes become one character.
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def parse_properties(text: str) -> dict[str, str]:
    """Java properties text -> dict (later duplicates win, as in java.util.Properties.load)."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        if "\\" not in line:  # no escapes: the key ends at the first separator
            found = _SEPARATOR.search(line)
            i = len(line) if found is None else found.start()
        else:
            i = _key_end(line)
        key, rest = line[:i], line[i:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        result[_unescape(key)] = _unescape(rest)
    return result


def _key_end(line: str) -> int:
    """Where the key of a line with escapes ends (an escaped separator is part of the key)."""
    i = 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] in "=: \t\f":
            break
        i += 1
    return min(i, len(line))


def format_value(value: object) -> str:
    """A statistic as written in metadata.properties (see the module docstring)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return str(int(when.timestamp() * 1000))
    return str(value)


def pack_creation_meta(crc: int, creation_time_ms: int) -> bytes:
    """Pinot's creation.meta: CRC then creation time, both big-endian int64."""
    return struct.pack(">qq", crc, creation_time_ms)


def unpack_creation_meta(data: bytes) -> tuple[int, int]:
    """(crc, creation_time_ms) from a creation.meta file's 16 bytes."""
    if len(data) != 16:
        raise ValueError(f"creation.meta must be 16 bytes, not {len(data)}")
    crc, created = struct.unpack(">qq", data)
    return crc, created


def _info(name: str, mtime: int, size: int = 0, is_dir: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if is_dir else 0o644
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.size = size
    return info


def pack_segment(segment_dir: Path, tar_path: Path, mtime: int = 0) -> int:
    """Pack the files of `segment_dir` into `tar_path` (see Determinism); returns its size."""
    files = sorted(p for p in segment_dir.iterdir() if p.is_file())
    members = [(path.name, path.stat().st_size, path.open) for path in files]
    return _pack(segment_dir.name, members, tar_path, mtime)


def pack_files(name: str, files: Mapping[str, bytes], tar_path: Path, mtime: int = 0) -> int:
    """Pack the segment `name` whose files (by base name) are in memory: the same bytes as
    `pack_segment` of a folder `name` holding those files; returns the tar's size."""
    members = [
        (file, len(data), lambda _mode, data=data: io.BytesIO(data))
        for file, data in sorted(files.items())
    ]
    return _pack(name, members, tar_path, mtime)


def _pack(
    name: str, members: list[tuple[str, int, Callable[..., IO[bytes]]]], tar_path: Path, mtime: int
) -> int:
    """`members`: (base name, size, a function opening it for reading), in name order."""
    with tar_path.open("wb") as raw:
        with (
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            tar.addfile(_info(f"{name}/", mtime, is_dir=True))
            for file, size, opener in members:
                with opener("rb") as handle:
                    tar.addfile(_info(f"{name}/{file}", mtime, size), handle)
        raw.flush()
    return tar_path.stat().st_size


def read_segment_files(tar_path: Path) -> dict[str, bytes]:
    """The regular files of a segment tar by base name (`data.parquet`, ...)."""
    files: dict[str, bytes] = {}
    with tarfile.open(tar_path, mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            handle = tar.extractfile(member)
            if handle is not None:
                files[member.name.rsplit("/", 1)[-1]] = handle.read()
    return files


def read_metadata_files(stream: IO[bytes]) -> dict[str, bytes]:
    """`metadata.properties` and `creation.meta` of a segment tar read as a stream (the files
    commit end carries), without unpacking the data file."""
    wanted = {METADATA_FILE, CREATION_META}
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=stream, mode="r|gz") as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            if member.isfile() and name in wanted:
                handle = tar.extractfile(member)
                if handle is not None:
                    files[name] = handle.read()
    missing = sorted(wanted - files.keys())
    if missing:
        raise ValueError(f"not a segment: no {', '.join(missing)}")
    return files


def read_segment(tar_path: Path) -> tuple[dict[str, str], pa.Table]:
    """A packed segment's metadata properties and rows (in stored order)."""
    files = read_segment_files(Path(tar_path))
    missing = [f for f in (DATA_FILE, METADATA_FILE) if f not in files]
    if missing:
        raise ValueError(f"{tar_path} is not a segment: no {', '.join(missing)}")
    metadata = parse_properties(files[METADATA_FILE].decode("ascii"))
    return metadata, read_parquet(files[DATA_FILE])
