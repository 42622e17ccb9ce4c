"""The ZooKeeper browser's service: Pinot's `/zk/ls|lsl|get|stat|put|delete` over the store.

Contract:
- Paths are ZooKeeper paths as the process sees them: inside the chroot of `ZK_HOSTS`, if any
  (the client never sees above it). `check_path` refuses (BadRequest, 400) a path that is not
  absolute, ends with "/" (other than "/"), has an empty, "." or ".." segment, or holds a
  character ZooKeeper forbids. Reads may go anywhere in the chroot, as Pinot's do; writes only
  strictly below the cluster's root (`/<CLUSTER_NAME>/...`): never the root, the cluster's root
  itself or another cluster's tree (BadRequest).
- A missing znode is NotFound (404). `get` answers the data decoded: gzip undone
  (`tables.zk.browse.unpack`), JSON parsed (ZNRecords are JSON), other text as a string, None for
  empty data; with the version read in the same call, so an editor can send it back.
- `put` stores a ZNRecord (Helix's serialised form, `tables.zk.codec`: compressed when the record
  asks or is large; RecordTooLarge is a 400). It is compare-and-set: an existing znode is written
  only at `expected_version` (required, the version the caller read; a stale one is Conflict, 409,
  and writes nothing). A missing znode is created when `expected_version` is -1, its parent
  exists (a missing parent is NotFound: no tree of parents from a typo) and the access option
  allows it (Helix's `AccessOption` bits: PERSISTENT 1 creates,
  THROW_EXCEPTION_IFNOTEXIST 16 refuses with 404; ephemeral creation is refused: the znode would
  die with the controller's session).
- `delete` removes one znode without children (Conflict with children, never recursive), at
  `expected_version` unless that is -1 (Pinot's default: any version).
- Each write returns a `ZkWrite` naming what changed, for the caller's audit entry.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from tables.domain.znrecord import ZNRecord, ZNRecordError
from tables.zk import codec
from tables.zk.browse import Unpackable, children_stats, stat_fields, unpack
from tables.zk.errors import BadVersion, NodeExists, NoNode, NotEmpty

from .context import ClusterContext
from .errors import BadRequest, Conflict, NotFound

__all__ = ["ZkBrowser", "ZkRead", "ZkWrite", "check_path", "parse_record"]

PERSISTENT, EPHEMERAL, PERSISTENT_SEQUENTIAL, EPHEMERAL_SEQUENTIAL = 1, 2, 4, 8
THROW_EXCEPTION_IFNOTEXIST = 16
ACCESS_OPTIONS = 31  # every bit Helix defines
MAX_PATH_LENGTH = 4096
DIFF_LIMIT = 200  # lines of the audit's diff
ZNRECORD_MEMBERS = frozenset({"id", "simpleFields", "mapFields", "listFields"})
# What ZooKeeper refuses in a path (PathUtils.validatePath): control characters and a few ranges.
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff]")


@dataclass(frozen=True)
class ZkRead:
    data: Any
    stat: dict[str, int]


@dataclass(frozen=True)
class ZkWrite:
    path: str
    version: int | None  # the new version (None after a delete)
    created: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


def check_path(path: str | None) -> str:
    """`path` when it is a valid absolute znode path; BadRequest naming the rule it breaks."""
    if path is None or not path.strip():
        raise BadRequest("ZKPath cannot be null: give ?path=/...")
    path = path.strip()
    if not path.startswith("/"):
        raise BadRequest(f"ZKPath {path!r} must start with /")
    if len(path) > MAX_PATH_LENGTH:
        raise BadRequest(f"ZKPath is longer than {MAX_PATH_LENGTH} characters")
    if path != "/" and path.endswith("/"):
        raise BadRequest(f"ZKPath {path!r} cannot end with /")
    if _FORBIDDEN.search(path):
        raise BadRequest(f"ZKPath {path!r} holds a character ZooKeeper does not allow")
    if path != "/" and any(part in ("", ".", "..") for part in path[1:].split("/")):
        raise BadRequest(f"ZKPath {path!r} has an empty, '.' or '..' segment")
    return path


def parse_record(text: str | bytes | None) -> ZNRecord:
    """The ZNRecord in `text` (JSON); BadRequest on anything else, unknown members included."""
    if text is None or not text.strip():
        raise BadRequest("Must provide data through query parameter or payload")
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"Failed to deserialize the data: not JSON: {exc}") from None
    if isinstance(data, dict) and set(data) - ZNRECORD_MEMBERS:
        unknown = ", ".join(sorted(set(data) - ZNRECORD_MEMBERS))
        raise BadRequest(f"Failed to deserialize the data: unknown ZNRecord members: {unknown}")
    try:
        return ZNRecord.from_dict(data)
    except ZNRecordError as exc:
        raise BadRequest(f"Failed to deserialize the data: {exc}") from None


def _decoded(data: bytes) -> Any:
    try:
        raw = unpack(data)
    except Unpackable as exc:
        return f"<{len(data)} bytes that could not be unpacked: {exc}>"
    if not raw:
        return None
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text


def _pretty(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.splitlines()
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _diff(old: Any, new: Any) -> list[str]:
    """A unified diff of the formatted old and new data, bounded, NUL-free (PostgreSQL's JSON)."""
    lines = list(difflib.unified_diff(_pretty(old), _pretty(new), "before", "after", lineterm=""))
    if len(lines) > DIFF_LIMIT:
        lines = [*lines[:DIFF_LIMIT], f"... {len(lines) - DIFF_LIMIT} more line(s)"]
    return [line.replace("\x00", "\\x00")[:1000] for line in lines]


class ZkBrowser:
    """Reads and compare-and-set writes of znodes for the `/zk` API."""

    def __init__(self, ctx: ClusterContext) -> None:
        self.ctx = ctx
        self.store = ctx.client

    # --- reads -------------------------------------------------------------------------------
    def ls(self, path: str | None) -> list[str]:
        path = check_path(path)
        try:
            return sorted(self.store.get_children(path))
        except NoNode:
            raise self._missing(path) from None

    def lsl(self, path: str | None) -> dict[str, dict[str, int]]:
        path = check_path(path)
        try:
            return children_stats(self.store, path)
        except NoNode:
            raise self._missing(path) from None

    def stat(self, path: str | None) -> dict[str, int]:
        path = check_path(path)
        found = self.store.exists(path)
        if found is None:
            raise self._missing(path)
        return stat_fields(found)

    def get(self, path: str | None) -> ZkRead:
        path = check_path(path)
        try:
            data, found = self.store.get(path)
        except NoNode:
            raise self._missing(path) from None
        return ZkRead(_decoded(data), stat_fields(found))

    # --- writes ------------------------------------------------------------------------------
    def put(
        self, path: str | None, record: ZNRecord, expected_version: int, access_option: int = 1
    ) -> ZkWrite:
        path = self._writable(path)
        if not 0 < access_option <= ACCESS_OPTIONS:
            raise BadRequest(f"accessOption {access_option} is not one of Helix's AccessOptions")
        if expected_version < -1:
            raise BadRequest(f"expectedVersion {expected_version} is not a version (or -1)")
        try:
            payload = codec.encode(record)
        except codec.RecordTooLarge as exc:
            raise BadRequest(str(exc)) from None
        try:
            old, found = self.store.get(path)
        except NoNode:
            return self._create(path, record, payload, expected_version, access_option)
        if expected_version == -1:
            raise BadRequest(
                f"expectedVersion is required to change ZKPath {path} (it is at version "
                f"{found.version}): send the version you read, so no concurrent change is lost"
            )
        try:
            written = self.store.set(path, payload, version=expected_version)
        except BadVersion:
            raise self._stale(path, expected_version) from None
        except NoNode:
            raise self._missing(path) from None
        detail = {
            "expectedVersion": expected_version,
            "version": written.version,
            "diff": _diff(_decoded(old), record.to_dict()),
        }
        return ZkWrite(path, written.version, detail=detail)

    def delete(self, path: str | None, expected_version: int = -1) -> ZkWrite:
        path = self._writable(path)
        if expected_version < -1:
            raise BadRequest(f"expectedVersion {expected_version} is not a version (or -1)")
        try:
            old, found = self.store.get(path)
            self.store.delete(path, version=expected_version)
        except NoNode:
            raise self._missing(path) from None
        except BadVersion:
            raise self._stale(path, expected_version) from None
        except NotEmpty:
            raise Conflict(
                f"ZKPath {path} has children: delete them first (deletes are never recursive)"
            ) from None
        detail = {
            "expectedVersion": expected_version,
            "deletedVersion": found.version,
            "diff": _diff(_decoded(old), None),
        }
        return ZkWrite(path, None, detail=detail)

    # --- helpers -----------------------------------------------------------------------------
    def _writable(self, path: str | None) -> str:
        path = check_path(path)
        root = self.ctx.paths.root
        if not path.startswith(root + "/"):
            raise BadRequest(
                f"ZKPath {path} is outside the cluster {self.ctx.paths.cluster!r}: "
                f"only znodes under {root}/ may be changed"
            )
        return path

    def _create(
        self, path: str, record: ZNRecord, payload: bytes, expected_version: int, access: int
    ) -> ZkWrite:
        if expected_version != -1 or access & THROW_EXCEPTION_IFNOTEXIST:
            raise self._missing(path)
        if access & (EPHEMERAL | EPHEMERAL_SEQUENTIAL | PERSISTENT_SEQUENTIAL):
            raise BadRequest(
                f"ZKPath {path} does not exist and accessOption {access} asks for an ephemeral or "
                "sequential znode: only persistent znodes (accessOption 1) are created"
            )
        try:
            self.store.create(path, payload)
        except NoNode:
            parent = path.rsplit("/", 1)[0]
            raise NotFound(
                f"ZKPath {path} cannot be created: its parent {parent} does not exist"
            ) from None
        except NodeExists:
            raise Conflict(f"ZKPath {path} was created meanwhile: read it and edit again") from None
        detail = {"expectedVersion": -1, "version": 0, "diff": _diff(None, record.to_dict())}
        return ZkWrite(path, 0, created=True, detail=detail)

    def _stale(self, path: str, expected: int) -> Conflict:
        now = self.store.exists(path)
        at = f"is at version {now.version}" if now is not None else "no longer exists"
        return Conflict(
            f"ZKPath {path} {at}, not the expected version {expected}: someone changed it since "
            "it was read; reload it and edit again (nothing was written)"
        )

    @staticmethod
    def _missing(path: str) -> NotFound:
        return NotFound(f"ZKPath {path} does not exist")
