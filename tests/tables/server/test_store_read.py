"""A replica's copy of a committed segment is read from the deep store when its download URL is
the controller's route (`tables.server.local_segments`): no HTTP at all (the URLs here name a
closed port); a copy that is missing or has another CRC is downloaded as before, and a URL that
is not the controller's route (a peer's) is never mapped to the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import (
    CREATION_META,
    METADATA_FILE,
    format_properties,
    pack_creation_meta,
    pack_segment,
)
from tables.server.local_segments import DownloadError, LocalSegments
from tests.ingest_cluster import free_port

TABLE = "events_REALTIME"
SEGMENT = "events__0__4__20260101T0000Z"
CRC = 4242


def _tar(tmp_path: Path, crc: int) -> Path:
    folder = tmp_path / f"built-{crc}" / SEGMENT
    folder.mkdir(parents=True)
    (folder / METADATA_FILE).write_text(format_properties({"segment.name": SEGMENT}))
    (folder / CREATION_META).write_bytes(pack_creation_meta(crc, 1))
    tar = tmp_path / f"{SEGMENT}-{crc}.tar.gz"
    pack_segment(folder, tar)
    return tar


@pytest.fixture
def store(tmp_path) -> DeepStore:
    return DeepStore.from_uri((tmp_path / "deepstore").as_uri())


def _route(port: int) -> str:
    return f"http://127.0.0.1:{port}/segments/events/{SEGMENT}"


def test_the_controllers_route_is_read_from_the_deep_store(tmp_path, store):
    tar = _tar(tmp_path, CRC)
    store.publish(tar, store.segment_key("events", SEGMENT))
    local = LocalSegments(tmp_path / "server", "token", "Server_a_1", lambda: store)
    path = local.fetch(TABLE, SEGMENT, _route(free_port()), CRC)  # nobody listens there
    assert path.read_bytes() == tar.read_bytes()
    assert local.store_reads == 1
    assert local.fetch(TABLE, SEGMENT, _route(free_port()), CRC) == path  # present: kept
    assert local.store_reads == 1


def test_another_crc_or_no_copy_in_the_store_is_downloaded(tmp_path, store):
    local = LocalSegments(tmp_path / "server", "token", "Server_a_1", lambda: store)
    with pytest.raises(DownloadError):  # not in the store: the download is tried (and refused)
        local.fetch(TABLE, SEGMENT, _route(free_port()), CRC)
    store.publish(_tar(tmp_path, CRC + 1), store.segment_key("events", SEGMENT))
    with pytest.raises(DownloadError):
        local.fetch(TABLE, SEGMENT, _route(free_port()), CRC)
    assert local.store_reads == 0
    assert not local.path(TABLE, SEGMENT).exists()
    assert list(local.path(TABLE, SEGMENT).parent.iterdir()) == []  # no partial file left


def test_a_peer_url_or_a_server_without_the_store_downloads(tmp_path, store):
    store.publish(_tar(tmp_path, CRC), store.segment_key("events", SEGMENT))
    local = LocalSegments(tmp_path / "server", "token", "Server_a_1", lambda: store)
    peer = f"http://127.0.0.1:{free_port()}/segments/{TABLE}/{SEGMENT}/peer"
    with pytest.raises(DownloadError):
        local.fetch(TABLE, SEGMENT, peer, CRC)
    without = LocalSegments(tmp_path / "other", "token", "Server_b_2")
    with pytest.raises(DownloadError):
        without.fetch(TABLE, SEGMENT, _route(free_port()), CRC)
    assert local.store_reads == 0 and without.store_reads == 0
