"""Commit end moves the committer's upload to the segment's final key inside the deep store and
never downloads it (issue 18), on the real ZooKeeper with the lead controller's completion
manager driven as a replica would. Each scenario runs on a real file store (a rename) and on
fsspec's in-memory store, which takes the object-store path (server-side copy, then delete) as
S3 does: the move itself, a move whose reply was lost, a controller dying in the middle of the
move (then a retried commit end with the same upload), and a retried commit end whose upload is
gone while another segment sits at the final key (refused, nothing written)."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import fsspec
import pytest

from tables.cluster import context
from tables.controller import completion_trust
from tables.controller.completion import CompletionManager, SegmentFiles
from tables.controller.resources import ResourceManager
from tables.domain.completion import Status
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import switch_stream_type
from tables.redisconn import get_redis
from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import format_properties, pack_creation_meta, pack_segment
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.tables.leaders import lead_every_partition

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
ME = "Controller_127.0.0.1_9000"
VIP = "http://controller:9000"
CRC = 1_234_567
PROPERTIES = {"segment.total.docs": "100", "segment.start.time": "1", "segment.end.time": "2"}


class Crash(BaseException):
    """The controller process dying at that instant (nothing after it runs)."""


class ReplyLost(DeepStore):
    """A deep store whose move happens but whose caller never hears so."""

    def move(self, source: str, key: str) -> str:
        super().move(source, key)
        raise TimeoutError("the move's reply was lost")


@pytest.fixture(params=["file", "object"])
def kind(request) -> str:
    return request.param


@pytest.fixture
def deep(kind, tmp_path):
    root = tmp_path / "deep"
    root.mkdir()
    if kind == "file":
        store = DeepStore.from_uri(root.as_uri())
    else:
        store = DeepStore(fsspec.filesystem("memory"), f"/bucket-{uuid.uuid4().hex}", "memory")
    yield store
    if kind == "object":
        with contextlib.suppress(FileNotFoundError):
            store.fs.rm(store.root, recursive=True)


@pytest.fixture
def table(servers, topic, zk, settings, monkeypatch):
    monkeypatch.setattr(completion_trust, "FLUSH_EVERY_S", 0)
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    rest["segmentsConfig"]["replication"] = "2"
    manager.add_table(rest)
    lead_every_partition(zk, ME)
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    admin.produce_many(topic, {p: [b'{"id": "2"}'] * 200 for p in range(4)}, now_ms=0)
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    segment = next(s for s in sorted(ideal.map_fields) if s.startswith("githubEvents__0__"))
    return segment, sorted(ideal.map_fields[segment])[0], _meta(zk, segment)


def _meta(zk, segment: str) -> SegmentZKMetadata:
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def _tar(tmp_path: Path, segment: str, crc: int) -> Path:
    folder = tmp_path / f"build-{uuid.uuid4().hex}" / segment
    folder.mkdir(parents=True)
    (folder / "metadata.properties").write_text(format_properties(PROPERTIES))
    (folder / "creation.meta").write_bytes(pack_creation_meta(crc, 1))
    (folder / "data.parquet").write_bytes(os.urandom(8192))
    pack_segment(folder, folder.parent / "segment.tar.gz")
    return folder.parent / "segment.tar.gz"


def _upload(store: DeepStore, tar: Path, segment: str) -> str:
    key = f"githubEvents/{segment}.tmp.{uuid.uuid4()}"
    store.publish(tar, key)
    return key


def _read(store: DeepStore, key: str) -> bytes:
    with store.open_read(key) as handle:
        return handle.read()


def _commit(store: DeepStore, segment: str, winner: str, end: int, location: str) -> Status:
    """One round of the protocol by `winner` on a fresh lead controller; commit end's status."""
    manager = CompletionManager(context.current, ME, VIP, lambda: store)
    consumed = manager.segment_consumed(winner, segment, end, "rowLimit")
    assert consumed.status == Status.COMMIT, consumed
    assert manager.segment_commit_start(winner, segment, end).status == Status.COMMIT_CONTINUE
    files = SegmentFiles(format_properties(PROPERTIES), pack_creation_meta(CRC, 1))
    params = {"segmentSizeBytes": "8192"}
    return manager.segment_commit_end(winner, segment, end, location, files, params).status


def _assert_committed(zk, store: DeepStore, segment: str, end: int, tar: Path) -> None:
    meta = _meta(zk, segment)
    assert (meta.status, meta.end_offset, meta.crc) == ("DONE", str(end), CRC)
    assert meta.download_url == f"{VIP}/segments/githubEvents/{segment}"
    assert _read(store, store.segment_key("githubEvents", segment)) == tar.read_bytes()
    assert store.uploads("githubEvents") == []


def test_commit_end_moves_the_upload_to_the_final_key(table, zk, deep, kind, tmp_path):
    segment, winner, meta = table
    end = int(meta.start_offset) + 100
    tar = _tar(tmp_path, segment, CRC)
    upload = _upload(deep, tar, segment)
    _upload(deep, tar, segment)  # another attempt's upload: deleted at commit end
    inode = os.stat(deep.path_for(upload)).st_ino if kind == "file" else None

    assert _commit(deep, segment, winner, end, deep.uri_for(upload)) == Status.COMMIT_SUCCESS
    _assert_committed(zk, deep, segment, end, tar)
    if kind == "file":  # renamed: the controller copied no byte
        assert os.stat(deep.path_for(deep.segment_key("githubEvents", segment))).st_ino == inode


def test_a_move_whose_reply_was_lost_still_commits(table, zk, deep, kind, tmp_path):
    segment, winner, meta = table
    end = int(meta.start_offset) + 100
    tar = _tar(tmp_path, segment, CRC)
    upload = _upload(deep, tar, segment)
    lossy = ReplyLost(deep.fs, deep.root, deep.scheme)

    assert _commit(lossy, segment, winner, end, deep.uri_for(upload)) == Status.COMMIT_SUCCESS
    _assert_committed(zk, deep, segment, end, tar)


def test_a_controller_dying_mid_move_loses_nothing_and_the_commit_end_is_retried(
    table, zk, deep, kind, tmp_path, monkeypatch
):
    """File store: the controller dies right after the rename; object store: between the copy
    and the delete. Nothing is committed, the segment's bytes stay readable, and the replica's
    commit end with the same upload succeeds on the next lead controller."""
    segment, winner, meta = table
    end = int(meta.start_offset) + 100
    tar = _tar(tmp_path, segment, CRC)
    upload = _upload(deep, tar, segment)
    final = deep.segment_key("githubEvents", segment)
    with monkeypatch.context() as patched:
        if kind == "file":
            patched.setattr(DeepStore, "_rename", staticmethod(_rename_then_die))
        else:
            patched.setattr(DeepStore, "_copy_within", _copy_then_die)
        with pytest.raises(Crash):
            _commit(deep, segment, winner, end, deep.uri_for(upload))

    assert _meta(zk, segment).status == "IN_PROGRESS"
    assert deep.exists(upload) is (kind == "object")  # object store: both copies are whole
    assert _read(deep, final) == tar.read_bytes()

    assert _commit(deep, segment, winner, end, deep.uri_for(upload)) == Status.COMMIT_SUCCESS
    _assert_committed(zk, deep, segment, end, tar)


def test_a_retried_commit_end_needs_its_own_segment_at_the_final_key(
    table, zk, deep, kind, tmp_path
):
    """The upload is gone and the final key holds another build (another CRC): FAILED, and
    neither ZooKeeper nor the object changes."""
    segment, winner, meta = table
    end = int(meta.start_offset) + 100
    other = _tar(tmp_path, segment, CRC + 1)
    final = deep.segment_key("githubEvents", segment)
    deep.publish(other, final)
    gone = deep.uri_for(f"githubEvents/{segment}.tmp.{uuid.uuid4()}")

    assert _commit(deep, segment, winner, end, gone) == Status.FAILED
    assert _meta(zk, segment).status == "IN_PROGRESS"
    assert _read(deep, final) == other.read_bytes()


def _rename_then_die(source: Path, target: Path) -> None:
    source.replace(target)
    raise Crash


def _copy_then_die(self: DeepStore, source: str, target: str) -> None:
    self.fs.cp_file(source, target)
    raise Crash
