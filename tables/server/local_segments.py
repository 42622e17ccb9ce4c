"""The server's local copies of committed segments: `<data_dir>/<table>/<segment>.tar.gz`.

A copy is fetched from the segment's download URL (`segment.download.url`, the controller's
`/segments/<raw>/<segment>`; the request carries the cluster token) and accepted only when the
CRC in its `creation.meta` equals the segment's ZK `segment.crc`; it is written to a temporary
name and renamed, so a file at the final name is always a whole, verified segment. A copy already
present with the right CRC is not fetched again (a restarted server keeps its segments).
"""

from __future__ import annotations

import shutil
import tarfile
import urllib.request
import uuid
from pathlib import Path

from tables.segments.segment_format import CREATION_META, read_metadata_files, unpack_creation_meta

__all__ = ["DownloadError", "LocalSegments"]

DOWNLOAD_TIMEOUT_S = 300.0  # Pinot's server-side timeout for segment transfers


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
    def __init__(self, data_dir: Path, token: str | None = None) -> None:
        self.data_dir = data_dir
        self.token = token

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
            raise DownloadError(f"{segment} has no download URL (peer download is not supported)")
        target.parent.mkdir(parents=True, exist_ok=True)
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

    def remove(self, table: str, segment: str) -> None:
        self.path(table, segment).unlink(missing_ok=True)
