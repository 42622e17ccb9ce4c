"""The server's local copies of committed segments: `<data_dir>/<table>/<segment>.tar.gz`.

A copy is fetched from the segment's download URL (`segment.download.url`, the controller's
`/segments/<raw>/<segment>`) or from a peer server's admin port (`tables.server.peer`), with the
cluster token, and accepted only when the CRC in its `creation.meta` equals the segment's ZK
`segment.crc` (a COMMITTING segment has none to check); it is written to a temporary name and
renamed, so a file at the final name is always a whole, verified segment. A copy already present
with the right CRC is not fetched again (a restarted server keeps its segments). When the
download URL is the controller's route and the server has the deep store (`deep_store`, the one
its committer writes to), the copy is read from the deep store itself, as Pinot's servers read a
deep-store URI, and the controller serves nothing (64 downloads at once, in a pause, took its
interpreter from the commits); a copy that is not there or has another CRC is downloaded.

`fetch_committed` is the ONLINE transition's fetch: the segment must be DONE or UPLOADED; a failed
download is tried `DOWNLOAD_ATTEMPTS` times (1 s, 2 s apart), and the fault-injection points
`server.<instance_id>.download_fails` / `server.any.download_fails` fail it (tests only).

A committer keeps the copy it built (`tables.server.committer`): written here before its commit
end; `mark_built` records the copy's CRC, and `built_crc` answers it back while the file still has
that CRC, so a pauseless committer's replica can go ONLINE with its own copy while the segment is
COMMITTING (`tables.server.peer`). `remove` forgets it.

A segment whose ZK status is COMMITTING (pauseless: committed but not built yet) has no download
URL: its replica waits (`DownloadWait`) for up to `download_timeout_s` of the table's stream
config, as Pinot's `RealtimeTableDataManager.downloadSegment` does: the stream config key
`realtime.segment.pauseless.download.timeoutSeconds`, else `segmentDownloadTimeoutMinutes`, else
10 minutes (a value that is not a positive number is skipped). Past it, TimeoutError
"Failed to download segment: <segment> after: <timeout>ms of retrying" (Pinot's words).
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from tables import faults
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import CREATION_META, read_metadata_files, unpack_creation_meta

__all__ = [
    "PAUSELESS_DOWNLOAD_TIMEOUT_KEY",
    "SEGMENT_DOWNLOAD_TIMEOUT_KEY",
    "DownloadError",
    "DownloadWait",
    "LocalSegments",
    "download_timeout_s",
]

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 300.0  # Pinot's server-side timeout for segment transfers
DOWNLOAD_ATTEMPTS = 3
PAUSELESS_DOWNLOAD_TIMEOUT_KEY = "realtime.segment.pauseless.download.timeoutSeconds"
SEGMENT_DOWNLOAD_TIMEOUT_KEY = "segmentDownloadTimeoutMinutes"
DEFAULT_PAUSELESS_DOWNLOAD_TIMEOUT_S = 600.0


def _positive(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and number > 0 else None


def download_timeout_s(stream_config: Mapping[str, str]) -> float:
    """How long a replica waits for a COMMITTING segment's download URL (module docstring)."""
    seconds = _positive(stream_config.get(PAUSELESS_DOWNLOAD_TIMEOUT_KEY))
    if seconds is not None:
        return seconds
    minutes = _positive(stream_config.get(SEGMENT_DOWNLOAD_TIMEOUT_KEY))
    return minutes * 60 if minutes is not None else DEFAULT_PAUSELESS_DOWNLOAD_TIMEOUT_S


@dataclass(frozen=True)
class DownloadWait:
    """One replica's wait for a COMMITTING segment, from the first time it was seen so."""

    started: float  # time.monotonic()
    timeout_s: float

    @classmethod
    def begin(cls, timeout_s: float) -> DownloadWait:
        return cls(time.monotonic(), timeout_s)

    def next_poll_s(self, segment: str, poll_s: float) -> float:
        """Seconds until the metadata is read again; TimeoutError once the wait is over."""
        remaining = self.started + self.timeout_s - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(
                f"Failed to download segment: {segment} after: "
                f"{round(self.timeout_s * 1000)}ms of retrying"
            )
        return min(poll_s, remaining)


class DownloadError(Exception):
    """The committed segment could not be fetched or did not verify."""


def _crc_of(path: Path) -> int | None:
    try:
        with path.open("rb") as stream:
            crc, _ = unpack_creation_meta(read_metadata_files(stream)[CREATION_META])
    except (OSError, ValueError, tarfile.TarError, EOFError):
        return None
    return crc


class LocalSegments:
    def __init__(
        self,
        data_dir: Path,
        token: str | None = None,
        instance_id: str = "",
        deep_store: Callable[[], DeepStore] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.token = token
        self.instance_id = instance_id
        self.deep_store = deep_store
        self.store_reads = 0  # copies read from the deep store, not downloaded (for tests)
        self._built: dict[tuple[str, str], int] = {}  # copies this server's committer built
        self._built_lock = threading.Lock()

    def path(self, table: str, segment: str) -> Path:
        return self.data_dir / table / f"{segment}.tar.gz"

    def has(self, table: str, segment: str, crc: int | None) -> bool:
        path = self.path(table, segment)
        return path.exists() and (crc is None or _crc_of(path) == crc)

    def fetch(self, table: str, segment: str, url: str, crc: int | None) -> Path:
        """Make sure a verified copy is present; returns its path."""
        target = self.path(table, segment)
        if self.has(table, segment, crc):
            return target
        if not url:
            raise DownloadError(
                f"{segment} has no download URL and no local copy (committed to peers only)"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        if self._from_store(table, segment, url, crc, target):
            return target
        temporary = target.with_name(f"{target.name}.part-{uuid.uuid4().hex}")
        request = urllib.request.Request(url)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with (
                urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as reply,
                temporary.open("wb") as out,
            ):
                shutil.copyfileobj(reply, out, 1 << 20)
            got = _crc_of(temporary)
            if crc is not None and got != crc:
                raise DownloadError(f"{segment} from {url}: CRC {got} does not match ZK's {crc}")
            temporary.replace(target)
        except OSError as exc:
            raise DownloadError(f"{segment} from {url}: {exc}") from exc
        finally:
            temporary.unlink(missing_ok=True)
        return target

    def _from_store(
        self, table: str, segment: str, url: str, crc: int | None, target: Path
    ) -> bool:
        """The copy read from this server's deep store when `url` is the controller's download
        route of the segment (module docstring); False: not tried, not there, or not the CRC."""
        raw = table.removesuffix("_REALTIME")
        route = f"/segments/{quote(raw)}/{quote(segment)}"
        if self.deep_store is None or crc is None or not urlsplit(url).path.endswith(route):
            return False
        temporary = target.with_name(f"{target.name}.part-{uuid.uuid4().hex}")
        try:
            store = self.deep_store()
            store.download(store.segment_key(raw, segment), temporary)
            if _crc_of(temporary) != crc:
                return False
            temporary.replace(target)
        except Exception as exc:
            log.debug("%s: not read from the deep store (%s); downloading it", segment, exc)
            return False
        finally:
            temporary.unlink(missing_ok=True)
        self.store_reads += 1
        return True

    def fetch_committed(
        self, table: str, segment: str, meta: SegmentZKMetadata, stop: threading.Event
    ) -> Path:
        """Fetch a DONE/UPLOADED segment's copy, with retries (module docstring)."""
        for point in (f"server.{self.instance_id}.download_fails", "server.any.download_fails"):
            if faults.trip(point):
                raise OSError(f"fault injection: {point}")
        if not meta.is_completed:
            raise ValueError(f"{segment} is {meta.status}: there is no committed copy to fetch")
        for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
            try:
                return self.fetch(table, segment, meta.download_url or "", meta.crc)
            except Exception:
                if attempt == DOWNLOAD_ATTEMPTS or stop.wait(attempt):
                    raise
        raise AssertionError("unreachable")

    def mark_built(self, table: str, segment: str) -> int | None:
        """Record the local copy as this server's own build; returns its CRC (None: unreadable,
        not recorded)."""
        crc = _crc_of(self.path(table, segment))
        if crc is not None:
            with self._built_lock:
                self._built[(table, segment)] = crc
        return crc

    def built_crc(self, table: str, segment: str) -> int | None:
        """The CRC of this server's own build of the segment, while its local copy has it."""
        with self._built_lock:
            crc = self._built.get((table, segment))
        return crc if crc is not None and self.has(table, segment, crc) else None

    def remove(self, table: str, segment: str) -> None:
        with self._built_lock:
            self._built.pop((table, segment), None)
        self.path(table, segment).unlink(missing_ok=True)
