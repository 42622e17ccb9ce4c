"""Peer download (round 2 §B.2, §B.4, §B.5): servers serve the committed copies they hold, and
fetch a segment committed without a deep-store copy from a server that holds it.

Serving (the admin port, `tables.server.admin`; every call needs the cluster token):
- `CommittedCopies.held(table, segment)`: the local copy of a replica this server holds ONLINE
  (Pinot serves only sealed segments), else None. `table` is the name with or without
  `_REALTIME`; the segment must be a replica of it on this server.
- `CommittedCopies.upload(table, segment, timeout_s)` (Pinot's `uploadCommittedSegment`): `Refused`
  404 unless the copy is held and the segment has ZK metadata; publishes the copy to the deep
  store at `<raw>/<segment>.tmp.<uuid>` within `timeout_s` (a slower upload is a 500; what it
  leaves is an orphan upload the healer deletes later), and returns the segment's ZK simple
  fields as Pinot's `updateCommittingSegmentZKMetadata` makes them
  (`tables.domain.deep_store_repairs.uploaded_metadata`): status DONE, CRC, start/end times,
  total docs and size from the copy, `segment.download.url` = the uploaded URI. ZooKeeper itself
  is not written: that is the controller's part.

Fetching (`SegmentFetch.fetch(table, segment, replica)`, the ONLINE transition's fetch):
- A DONE or UPLOADED segment with a download URL: `LocalSegments.fetch_committed`, as always.
- A table with `peerSegmentDownloadScheme`, and a segment COMMITTING or DONE with download URL ""
  (committed to peers only), in this order:
  1. its own copy: for a COMMITTING segment one this server's committer built
     (`LocalSegments.built_crc`), for a DONE one any local copy with ZooKeeper's CRC;
  2. a peer's: every other server whose ExternalView state for the segment is ONLINE, in random
     order, `GET http://<HELIX_HOST>:<adminPort, else HELIX_PORT>/segments/<table>/<segment>`
     with the cluster token (admin ports speak HTTP whatever the scheme says), through
     `LocalSegments.fetch`: a DONE copy must have ZooKeeper's CRC, a COMMITTING one has none to
     check (as in Pinot); a peer that fails is logged and the next one asked;
  3. otherwise the replica waits (`WaitingFor`), with the `DownloadWait` of a COMMITTING segment
     (`local_segments.download_timeout_s`, counted from the first such wait): past it the step
     fails with Pinot's "Failed to download segment: ..." and the replica goes to ERROR.
- Without a peer scheme a COMMITTING segment waits for its download URL as before, and a DONE one
  with URL "" can only be this server's own copy (`fetch_committed`), else the step fails.
"""

from __future__ import annotations

import logging
import random
import threading
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path

from tables.cluster.context import ClusterContext
from tables.cluster.reads import ClusterReader
from tables.domain.deep_store_repairs import uploaded_metadata
from tables.domain.idealstate import InstanceState
from tables.domain.names import raw_table_name, table_name_with_type
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.domain.segment_states import SegmentState
from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import (
    CREATION_META,
    METADATA_FILE,
    parse_properties,
    read_metadata_files,
    unpack_creation_meta,
)
from tables.zk.records import read_record

from .local_segments import DownloadError, DownloadWait, LocalSegments, download_timeout_s
from .replica import WAIT_POLL_S, Replica, WaitingFor

__all__ = ["CommittedCopies", "Refused", "SegmentFetch", "admin_base_url"]

log = logging.getLogger(__name__)


class Refused(Exception):
    """A refused admin call: its HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def admin_base_url(ctx: ClusterContext, instance: str) -> str | None:
    """`http://<HELIX_HOST>:<adminPort or HELIX_PORT>` of a server, None when unknown."""
    found = read_record(ctx.client, ctx.paths.participant_config(instance))
    if found is None:
        return None
    simple = found.record.simple_fields
    host, port = simple.get("HELIX_HOST"), simple.get("adminPort") or simple.get("HELIX_PORT")
    return f"http://{host}:{port}" if host and port else None


def segment_path(table: str, segment: str) -> str:
    """The admin path of a committed copy."""
    return f"/segments/{urllib.parse.quote(table, safe='')}/{urllib.parse.quote(segment, safe='')}"


class CommittedCopies:
    """The serving side (module docstring)."""

    def __init__(
        self,
        replicas_of: Callable[[str], dict[str, Replica] | None],
        local: LocalSegments,
        ctx: Callable[[], ClusterContext],
        deep_store: Callable[[], DeepStore],
    ) -> None:
        self.replicas_of, self.local, self.ctx, self.deep_store = (
            replicas_of,
            local,
            ctx,
            deep_store,
        )

    def held(self, table: str, segment: str) -> Path | None:
        try:
            table = table_name_with_type(table, "REALTIME")
        except ValueError:  # InvalidName: e.g. an OFFLINE table's name
            return None
        replica = (self.replicas_of(table) or {}).get(segment)
        if replica is None or replica.state is not SegmentState.ONLINE:
            return None
        path = self.local.path(table, segment)
        return path if path.is_file() else None

    def upload(self, table: str, segment: str, timeout_s: float) -> dict[str, str]:
        """Pinot's uploadCommittedSegment (module docstring); raises `Refused`."""
        path = self.held(table, segment)
        if path is None:
            raise Refused(404, f"Segment {segment} of table {table} is not held by this server")
        table = table_name_with_type(table, "REALTIME")
        ctx = self.ctx()
        found = read_record(ctx.client, ctx.paths.segment(table, segment))
        if found is None:
            raise Refused(404, f"Segment ZK metadata not found for segment: {segment}")
        current = SegmentZKMetadata.from_znrecord(found.record)
        with path.open("rb") as stream:
            files = read_metadata_files(stream)
        properties = parse_properties(files[METADATA_FILE].decode("utf-8"))
        crc, _created = unpack_creation_meta(files[CREATION_META])
        store = self.deep_store()
        key = f"{raw_table_name(table)}/{segment}.tmp.{uuid.uuid4()}"
        uri = _publish_within(store, path, key, timeout_s)
        try:
            done = uploaded_metadata(
                current,
                total_docs=_int(properties, "segment.total.docs"),
                start_time_ms=_int(properties, "segment.start.time"),
                end_time_ms=_int(properties, "segment.end.time"),
                crc=crc,
                size_bytes=path.stat().st_size,
                download_url=uri,
            )
        except ValueError as exc:
            store.delete(key)
            raise Refused(409, str(exc)) from None
        log.info("%s: uploaded the committed copy to %s", segment, uri)
        return dict(done.to_znrecord().simple_fields)


def _peers_only(meta: SegmentZKMetadata) -> bool:
    """COMMITTING, or DONE/UPLOADED with download URL "": no copy to download from a URL."""
    return meta.status is SegmentStatus.COMMITTING or (
        meta.is_completed and meta.download_url == ""
    )


def _int(properties: dict[str, str], key: str) -> int:
    try:
        return int(properties.get(key, "0"))
    except ValueError:
        return 0


def _publish_within(store: DeepStore, path: Path, key: str, timeout_s: float) -> str:
    """`store.publish(path, key)`, given up after `timeout_s` (Refused 500)."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["uri"] = store.publish(path, key)
        except Exception as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="upload-committed", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise Refused(500, f"the upload to {key} took longer than {timeout_s:g} s")
    if "error" in outcome:
        error = outcome["error"]
        raise Refused(500, f"the upload to {key} failed: {type(error).__name__}: {error}")
    return str(outcome["uri"])


class SegmentFetch:
    """The fetching side (module docstring)."""

    def __init__(
        self,
        instance_id: str,
        ctx: Callable[[], ClusterContext],
        local: LocalSegments,
        stop: threading.Event,
        shuffle: Callable[[list[str]], None] = random.shuffle,
    ) -> None:
        self.instance_id, self.ctx, self.local, self.stop = instance_id, ctx, local, stop
        self.shuffle = shuffle

    def fetch(self, table: str, segment: str, replica: Replica) -> None:
        """The ONLINE transition's fetch; `WaitingFor` while the copy cannot be had yet."""
        reader = ClusterReader(self.ctx())
        meta = reader.segment_metadata(table, segment)
        if not _peers_only(meta):
            self.local.fetch_committed(table, segment, meta, self.stop)
            return
        config = reader.get_table_config(table)
        committing = meta.status is SegmentStatus.COMMITTING
        if config.peer_segment_download_scheme:
            if self._own_copy(table, segment, meta):
                return
            # The ExternalView first, the metadata again after it: a peer seen ONLINE while the
            # segment is still COMMITTING (or DONE without URL) holds what the metadata says.
            states = reader.externalview(table).get(segment, {})
            meta = reader.segment_metadata(table, segment)
            if not _peers_only(meta):
                self.local.fetch_committed(table, segment, meta, self.stop)
                return
            if self._own_copy(table, segment, meta) or self._from_peers(table, meta, states):
                return
            what = f"a peer holding {segment} ONLINE" + (" (COMMITTING)" if committing else "")
        elif committing:
            what = f"the download URL of {segment} (COMMITTING)"
        else:
            self.local.fetch_committed(table, segment, meta, self.stop)
            return
        if replica.download_wait is None:
            replica.download_wait = DownloadWait.begin(download_timeout_s(config.stream_config))
        raise WaitingFor(what, replica.download_wait.next_poll_s(segment, WAIT_POLL_S))

    def _own_copy(self, table: str, segment: str, meta: SegmentZKMetadata) -> bool:
        if meta.status is SegmentStatus.COMMITTING:
            return self.local.built_crc(table, segment) is not None
        return self.local.has(table, segment, meta.crc)

    def _from_peers(self, table: str, meta: SegmentZKMetadata, states: dict[str, str]) -> bool:
        segment = meta.segment_name
        peers = sorted(
            i for i, s in states.items() if s == InstanceState.ONLINE and i != self.instance_id
        )
        self.shuffle(peers)
        crc = meta.crc if meta.is_completed else None
        for peer in peers:
            base = admin_base_url(self.ctx(), peer)
            if base is None:
                continue
            if crc is None:
                self.local.remove(table, segment)  # not our own build: nothing to keep
            try:
                self.local.fetch(table, segment, f"{base}{segment_path(table, segment)}", crc)
            except DownloadError as exc:
                log.warning("%s: %s from peer %s failed: %s", self.instance_id, segment, peer, exc)
                continue
            log.info("%s: fetched %s from peer %s", self.instance_id, segment, peer)
            return True
        return False
