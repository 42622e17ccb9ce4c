"""Many znodes in one request: data by ZooKeeper's multiRead, versions by a check transaction.

    handle = get_many_async(store, paths)          # requests leave now; nothing blocks
    found = handle.get()                           # [(data, stat) or None per path, in order]
    probe = check_versions_async(store, checks)    # [(path, version), ...], one request
    unchanged = probe.get()                        # True: every znode still at its version

Contract:
- `get_many_async(store, paths)` reads the data and stat of every path of `paths` (a
  `ZooKeeperStore` or a kazoo client) with ceil(len / MULTI_READ_OPS) pipelined multiRead
  requests (opcode 22, ZooKeeper 3.6 and later), where one asynchronous `get` per znode costs
  one request each: kazoo spends tens of microseconds of Python per request, which makes a read
  of 160,000 small znodes CPU bound in the client, not in ZooKeeper. The server answers each read
  on its own (not atomically, like separate gets): a missing znode is None in its place; any
  other error of one read, or of the request (connection loss, session expiry), is raised by
  `get()` as the project's error (`tables.zk.errors`).
- Only for znodes known to be small (segment metadata, a few KiB): the answer to one request
  holds all MULTI_READ_OPS of them, and kazoo reads it into memory whole.
- A server older than 3.6 does not know multiRead: it answers UNIMPLEMENTED and closes the
  connection (kazoo reconnects, the session lives on). `get()` then reads the same paths again
  with one `get` per znode (retried across the reconnect), as it does for the other multiReads
  that were lost with that connection, and the process uses single gets for that client from
  then on.
- `check_versions_async(store, checks)` is ONE transaction of `check` operations, the request
  kazoo's `transaction().check(...)...commit_async()` sends, built without kazoo's per-operation
  bookkeeping; `get()` is True when every znode is still at its version, False when one is not
  (or is gone), and raises the project's error when the request itself fails.
- kazoo has no multiRead: `MultiRead` is the request in kazoo's own serialization (the framing
  of its `Transaction`, with GetData operations). Both requests go through the client's request
  queue (`KazooClient._call`, as every kazoo call does), so they share the session, the chroot,
  the connection's ordering and its reconnects with the other requests.
"""

from __future__ import annotations

import struct
import weakref
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, ConnectionLoss, NoNodeError, UnimplementedError
from kazoo.protocol.serialization import (
    CheckVersion,
    GetData,
    Transaction,
    ZnodeStat,
    write_string,
)

from tables.zk.errors import translate
from tables.zk.zookeeper import raw

__all__ = ["MULTI_READ_OPS", "CheckVersions", "MultiRead", "check_versions_async", "get_many_async"]

MULTI_READ_OPS = 500
_HEADER = struct.Struct("!iBi")  # MultiHeader: op type, done, error
_INT = struct.Struct("!i")
_STAT = struct.Struct("!qqqqiiiqiiq")
_ERROR_OP = -1
_GET_HEADER = _HEADER.pack(GetData.type, False, -1)
_CHECK_HEADER = _HEADER.pack(CheckVersion.type, False, -1)
_END = _HEADER.pack(-1, True, -1)

# The kazoo clients whose server does not know multiRead (single gets from then on).
_unsupported: weakref.WeakSet[KazooClient] = weakref.WeakSet()


class _NotMultiRead(Exception):
    """The server's answer is not a multiRead answer."""


def _full_path(chroot: str, path: str) -> str:
    """`path` under the client's chroot (kazoo's `_prefix_root` for normalized paths)."""
    if not chroot:
        return path
    return chroot if path == "/" else chroot + path


class MultiRead(namedtuple("MultiRead", "paths")):
    """The multiRead request of GetData operations on `paths` (full server paths, chroot
    included); its answer is one `(data, ZnodeStat)` or kazoo exception per path."""

    type = 22

    def serialize(self) -> bytearray:
        out = bytearray()
        for path in self.paths:
            out += _GET_HEADER
            out += write_string(path)
            out.append(0)  # no watch
        out += _END
        return out

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        found: list[Any] = []
        try:
            while True:
                kind, done, _err = _HEADER.unpack_from(buffer, offset)
                offset += _HEADER.size
                if done:
                    return found
                if kind == _ERROR_OP:
                    code = _INT.unpack_from(buffer, offset)[0]
                    offset += _INT.size
                    found.append(EXCEPTIONS[code]())
                    continue
                if kind != GetData.type:
                    raise _NotMultiRead(f"operation type {kind} in a multiRead answer")
                length = _INT.unpack_from(buffer, offset)[0]
                offset += _INT.size
                data = b"" if length < 0 else buffer[offset : offset + length]
                offset += max(length, 0)
                found.append((data, ZnodeStat._make(_STAT.unpack_from(buffer, offset))))
                offset += _STAT.size
        except struct.error as exc:
            raise _NotMultiRead(f"truncated multiRead answer: {exc}") from None


class CheckVersions(Transaction):
    """A transaction of CheckVersion operations, serialized in one pass (kazoo's Transaction
    builds a header object per operation)."""

    def serialize(self) -> bytearray:
        out = bytearray()
        for path, version in self.operations:
            out += _CHECK_HEADER
            out += write_string(path)
            out += _INT.pack(version)
        out += _END
        return out


class _Many:
    """The pending answers of one `get_many_async`."""

    def __init__(self, client: KazooClient, paths: list[str]) -> None:
        self._client = client
        self._requests: list[tuple[list[str], Any]] = []
        self._singles: list[Any] | None = None
        if client in _unsupported:
            self._singles = [client.get_async(p) for p in paths]
            return
        chroot = client.chroot
        for start in range(0, len(paths), MULTI_READ_OPS):
            part = paths[start : start + MULTI_READ_OPS]
            answer = client.handler.async_result()
            client._call(MultiRead([_full_path(chroot, p) for p in part]), answer)
            self._requests.append((part, answer))

    @property
    def requests(self) -> int:
        """The requests sent (single gets for a server without multiRead)."""
        return len(self._singles) if self._singles is not None else len(self._requests)

    def get(self) -> list[tuple[bytes, Any] | None]:
        if self._singles is not None:
            return [_one(_answer(single)) for single in self._singles]
        found: list[tuple[bytes, Any] | None] = []
        for part, answer in self._requests:
            try:
                results = answer.get()
            except (UnimplementedError, _NotMultiRead):
                _unsupported.add(self._client)
                results = self._one_by_one(part)
            except ConnectionLoss:
                if self._client not in _unsupported:
                    raise translate(ConnectionLoss()) from None
                results = self._one_by_one(part)  # sent on the connection the server closed
            except Exception as exc:
                raise translate(exc) from None
            if len(results) != len(part):
                raise _NotMultiRead(f"{len(results)} answers for {len(part)} reads")
            found.extend(_one(result) for result in results)
        return found

    def _one_by_one(self, part: list[str]) -> list[Any]:
        """The reads of `part` as single gets, each retried (kazoo's command retry) across the
        reconnect: a server refusing an unknown request closes the connection after its answer."""
        return [_retried_get(self._client, path) for path in part]


def _answer(single: Any) -> Any:
    """A single get's answer, or its exception (as a multiRead answer has it)."""
    try:
        return single.get()
    except Exception as exc:
        return exc


def _retried_get(client: KazooClient, path: str) -> Any:
    try:
        return client.retry(client.get, path)
    except Exception as exc:
        return exc


def _one(result: Any) -> tuple[bytes, Any] | None:
    if isinstance(result, NoNodeError):
        return None
    if isinstance(result, Exception):
        raise translate(result)
    data, stat = result
    return (data or b"", stat)


class _Unchanged:
    """The pending answer of one `check_versions_async`."""

    def __init__(self, answer: Any) -> None:
        self._answer = answer

    def get(self) -> bool:
        try:
            results = self._answer.get()
        except Exception as exc:
            raise translate(exc) from None
        return not any(isinstance(result, Exception) for result in results)


def get_many_async(store: Any, paths: Sequence[str]) -> _Many:
    """Issue the reads of `paths` now; see the module docstring."""
    return _Many(raw(store), list(paths))


def check_versions_async(store: Any, checks: Sequence[tuple[str, int]]) -> _Unchanged:
    """Issue one transaction checking every `(path, version)` now; see the module docstring."""
    client = raw(store)
    chroot = client.chroot
    answer = client.handler.async_result()
    client._call(CheckVersions([(_full_path(chroot, p), v) for p, v in checks]), answer)
    return _Unchanged(answer)
