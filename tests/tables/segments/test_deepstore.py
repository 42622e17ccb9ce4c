"""The deep store on file:// (S3 only against a real endpoint named by S3_TEST_ENDPOINT); moves
also on fsspec's in-memory file system, which takes the object-store path (server-side copy, then
delete) as S3 does."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import fsspec
import pytest

from tables.segments.deepstore import TMP_MARKER, DeepStore
from tests.envdefaults import ROOT


@pytest.fixture
def store(tmp_path) -> DeepStore:
    return DeepStore.from_uri((tmp_path / "deep").as_uri())


@pytest.fixture
def segment_file(tmp_path) -> Path:
    path = tmp_path / "seg.tar.gz"
    path.write_bytes(b"segment bytes " * 1000)
    return path


def _read(store: DeepStore, key: str) -> bytes:
    with store.open_read(key) as handle:
        return handle.read()


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if TMP_MARKER in p.name]


def test_keys_and_uris(store, tmp_path):
    assert store.segment_key("githubEvents", "githubEvents__0__1__20210721T0600Z") == (
        "githubEvents/githubEvents__0__1__20210721T0600Z.tar.gz"
    )
    assert store.segment_key("githubEvents_REALTIME", "s") == "githubEvents/s.tar.gz"
    assert store.staging_key("githubEvents_REALTIME", "s") == "_staging/githubEvents/s.parquet"
    assert store.staging_key("githubEvents", "s.parquet") == "_staging/githubEvents/s.parquet"
    assert store.uri_for("t/s.tar.gz") == (tmp_path / "deep" / "t" / "s.tar.gz").as_uri()
    for bad in ("", "/abs", "a/../b", "a//b", "./a"):
        with pytest.raises(ValueError, match="invalid deep store key"):
            store.path_for(bad)


def test_from_uri_forms(tmp_path):
    assert DeepStore.from_uri(str(tmp_path / "plain")).root == str(tmp_path / "plain")
    assert (tmp_path / "plain").is_dir()
    with pytest.raises(ValueError, match="absolute"):
        DeepStore.from_uri("file://relative/path")
    with pytest.raises(ValueError, match="unsupported scheme"):
        DeepStore.from_uri("ftp://host/path")


def test_publish_read_download_delete(store, segment_file, tmp_path):
    key = store.segment_key("t", "s")
    assert not store.exists(key)
    uri = store.publish(segment_file, key)
    assert uri == store.uri_for(key)
    assert store.exists(key) and store.size(key) == segment_file.stat().st_size
    with store.open_read(key) as handle:
        assert handle.read() == segment_file.read_bytes()
    copy = store.download(key, tmp_path / "down" / "copy.tar.gz")
    assert copy.read_bytes() == segment_file.read_bytes()
    assert temporaries(tmp_path) == []

    segment_file.write_bytes(b"rebuilt")  # publishing again replaces the object whole
    store.publish(segment_file, key)
    with store.open_read(key) as handle:
        assert handle.read() == b"rebuilt"

    assert store.delete(key) is True
    assert store.delete(key) is False
    assert not store.exists(key)
    with pytest.raises(FileNotFoundError):
        store.size(key)


def test_a_failed_rename_leaves_no_partial_object(store, segment_file, monkeypatch, tmp_path):
    key = store.segment_key("t", "s")

    def broken(temporary, target):
        assert temporary.read_bytes() == segment_file.read_bytes()  # fully written first
        raise OSError("disk gone")

    monkeypatch.setattr(DeepStore, "_replace", staticmethod(broken))
    with pytest.raises(OSError, match="disk gone"):
        store.publish(segment_file, key)
    assert not store.exists(key)
    assert temporaries(tmp_path / "deep") == []  # the failed attempt removed its temporary


def test_a_publish_that_need_not_be_durable_skips_the_syncs(store, segment_file, monkeypatch):
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    store.publish(segment_file, "_staging/t/rows.parquet", durable=False)
    assert synced == []
    assert _read(store, "_staging/t/rows.parquet") == segment_file.read_bytes()
    store.publish(segment_file, store.segment_key("t", "s"))
    assert len(synced) == 2  # the file, then its folder


def test_a_batch_publishes_each_object_on_its_own(store, segment_file, monkeypatch, tmp_path):
    other = tmp_path / "other.tar.gz"
    other.write_bytes(b"other bytes")
    keys = [store.segment_key("t", f"s{i}") for i in range(4)]
    store.publish(other, keys[2])  # replaced by the batch unless its rename fails
    real = DeepStore._replace

    def third_fails(temporary, target):
        if target.name == "s2.tar.gz":
            raise OSError("disk gone")
        real(temporary, target)

    monkeypatch.setattr(DeepStore, "_replace", staticmethod(third_fails))
    missing = tmp_path / "missing.tar.gz"
    out = store.publish_many(
        [(segment_file, keys[0]), (missing, keys[1]), (segment_file, keys[2]), (other, keys[3])]
    )
    assert out[0] == store.uri_for(keys[0]) and out[3] == store.uri_for(keys[3])
    assert isinstance(out[1], FileNotFoundError)
    assert isinstance(out[2], OSError) and "disk gone" in str(out[2])
    assert _read(store, keys[0]) == segment_file.read_bytes()
    assert not store.exists(keys[1])
    assert _read(store, keys[2]) == b"other bytes"  # the old object stays whole
    assert _read(store, keys[3]) == b"other bytes"
    assert temporaries(tmp_path / "deep") == []


def test_a_crash_before_the_rename_keeps_the_old_object(store, segment_file, tmp_path):
    """A real crash (the process dies between writing and renaming): the previous object stays
    whole, only a temporary is left behind, and cleanup removes it once it is old."""
    key = store.segment_key("t", "s")
    old = segment_file.read_bytes()
    store.publish(segment_file, key)
    new_file = tmp_path / "new.tar.gz"
    new_file.write_bytes(b"new bytes " * 5000)
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from tables.segments.deepstore import DeepStore

        DeepStore._replace = staticmethod(lambda tmp, target: os._exit(17))
        store = DeepStore.from_uri({(tmp_path / "deep").as_uri()!r})
        store.publish(Path({str(new_file)!r}), {key!r})
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script], env=env, check=False, timeout=120)
    assert result.returncode == 17
    with store.open_read(key) as handle:
        assert handle.read() == old
    left = temporaries(tmp_path / "deep")
    assert len(left) == 1 and left[0].read_bytes() == new_file.read_bytes()

    now = time.time()
    assert store.cleanup_temporaries(older_than_s=3600, now=now) == []  # may still be in flight
    removed = store.cleanup_temporaries(older_than_s=3600, now=now + 7200)
    assert removed == [str(left[0].relative_to(tmp_path / "deep"))]
    assert temporaries(tmp_path / "deep") == []
    assert store.exists(key)


def test_cleanup_removes_only_old_temporaries(store, tmp_path):
    root = tmp_path / "deep"
    (root / "t").mkdir(parents=True)
    stale = root / "t" / f"s.tar.gz{TMP_MARKER}{uuid.uuid4().hex}"
    fresh = root / "t" / f"u.tar.gz{TMP_MARKER}{uuid.uuid4().hex}"
    keep = root / "t" / "s.tar.gz"
    for path in (stale, fresh, keep):
        path.write_bytes(b"x")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    os.utime(keep, (old, old))
    assert store.cleanup_temporaries(older_than_s=3600) == [f"t/{stale.name}"]
    assert not stale.exists() and fresh.exists() and keep.exists()


def test_delete_uploads_removes_only_that_segments_uploads(store, segment_file):
    segment = "t__0__3__20260101T0000Z"
    uploads = [f"t/{segment}.tmp.{uuid.uuid4().hex}" for _ in range(2)]
    others = [f"t/{segment}.tar.gz", f"t/t__0__31__20260101T0000Z.tmp.{uuid.uuid4().hex}"]
    for key in (*uploads, *others):
        store.publish(segment_file, key)
    assert store.delete_uploads("t_REALTIME", segment) == sorted(uploads)
    assert [store.exists(k) for k in (*uploads, *others)] == [False, False, True, True]
    assert store.delete_uploads("t", segment) == []


def test_delete_table_removes_its_folder_and_staged_rows_only(store, segment_file):
    segment = "t__0__3__20260101T0000Z"
    mine = [
        f"t/{segment}.tar.gz",
        f"t/{segment}.tmp.{uuid.uuid4().hex}",
        store.staging_key("t_REALTIME", f"{segment}.{uuid.uuid4().hex}"),
    ]
    others = ["t2/x.tar.gz", "tt/x.tar.gz", store.staging_key("t2", "x")]
    for key in (*mine, *others):
        store.publish(segment_file, key)
    assert store.delete_table("t_REALTIME") == sorted(mine, key=lambda k: k.startswith("_"))
    assert [store.exists(k) for k in (*mine, *others)] == [False] * 3 + [True] * 3
    assert not (Path(store.root) / "t").exists()
    assert store.delete_table("t") == []


# --- moves inside the store ----------------------------------------------------------------------
UPLOAD = f"t/s.tmp.{uuid.uuid4()}"


def _read(store: DeepStore, key: str) -> bytes:
    with store.open_read(key) as handle:
        return handle.read()


def test_a_local_move_renames_the_object(store, segment_file, tmp_path):
    final = store.segment_key("t", "s")
    store.publish(segment_file, UPLOAD)
    inode = os.stat(store.path_for(UPLOAD)).st_ino
    assert store.move(UPLOAD, final) == store.uri_for(final)
    assert not store.exists(UPLOAD)
    assert os.stat(store.path_for(final)).st_ino == inode  # renamed: no byte was copied
    assert _read(store, final) == segment_file.read_bytes()

    rebuilt = tmp_path / "rebuilt.tar.gz"
    rebuilt.write_bytes(b"rebuilt " * 100)
    store.publish(rebuilt, UPLOAD)
    store.move(UPLOAD, final)  # replaces the object already there
    assert _read(store, final) == rebuilt.read_bytes()

    with pytest.raises(FileNotFoundError):  # no source: nothing changes
        store.move(UPLOAD, final)
    assert _read(store, final) == rebuilt.read_bytes()
    assert temporaries(tmp_path / "deep") == []


def test_a_local_move_across_file_systems_publishes_then_removes(
    store, segment_file, monkeypatch, tmp_path
):
    def cross_device(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(DeepStore, "_rename", staticmethod(cross_device))
    final = store.segment_key("t", "s")
    store.publish(segment_file, UPLOAD)
    store.move(UPLOAD, final)
    assert not store.exists(UPLOAD) and _read(store, final) == segment_file.read_bytes()
    assert temporaries(tmp_path / "deep") == []


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_during_a_local_move_leaves_one_whole_object(store, segment_file, tmp_path, when):
    """A real crash just before or just after the rename: the object is whole under exactly one
    of the two names, and a retried move (or none needed) ends with it at the destination."""
    final = store.segment_key("t", "s")
    store.publish(segment_file, UPLOAD)
    crash = "os._exit(17)" if when == "before" else "(source.replace(target), os._exit(17))"
    script = textwrap.dedent(
        f"""
        import os
        from tables.segments.deepstore import DeepStore

        DeepStore._rename = staticmethod(lambda source, target: {crash})
        DeepStore.from_uri({(tmp_path / "deep").as_uri()!r}).move({UPLOAD!r}, {final!r})
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script], env=env, check=False, timeout=120)
    assert result.returncode == 17
    held = [key for key in (UPLOAD, final) if store.exists(key)]
    assert held == ([UPLOAD] if when == "before" else [final])
    assert _read(store, held[0]) == segment_file.read_bytes()
    if held == [UPLOAD]:
        store.move(UPLOAD, final)
    assert _read(store, final) == segment_file.read_bytes() and not store.exists(UPLOAD)


class Crash(BaseException):
    """A process dying at that instant (nothing after it runs)."""


@pytest.fixture
def object_store() -> DeepStore:
    """A store on fsspec's in-memory file system: not local, so moves copy then delete."""
    fs = fsspec.filesystem("memory")
    root = f"/bucket-{uuid.uuid4().hex[:12]}/deep"
    yield DeepStore(fs, root, "memory")
    with contextlib.suppress(FileNotFoundError):
        fs.rm(root, recursive=True)


def test_an_object_store_move_copies_then_deletes(object_store, segment_file, tmp_path):
    store, final = object_store, object_store.segment_key("t", "s")
    store.publish(segment_file, UPLOAD)
    assert store.move(UPLOAD, final) == store.uri_for(final)
    assert not store.exists(UPLOAD) and _read(store, final) == segment_file.read_bytes()
    with pytest.raises(FileNotFoundError):
        store.move(UPLOAD, final)
    assert _read(store, final) == segment_file.read_bytes()


def test_a_crash_between_copy_and_delete_leaves_both_objects_whole(
    object_store, segment_file, monkeypatch
):
    store, final = object_store, object_store.segment_key("t", "s")
    store.publish(segment_file, UPLOAD)
    copy = DeepStore._copy_within

    def copy_then_die(self, source, target):
        copy(self, source, target)
        raise Crash

    monkeypatch.setattr(DeepStore, "_copy_within", copy_then_die)
    with pytest.raises(Crash):
        store.move(UPLOAD, final)
    assert _read(store, UPLOAD) == _read(store, final) == segment_file.read_bytes()
    monkeypatch.setattr(DeepStore, "_copy_within", copy)
    store.move(UPLOAD, final)  # the retry copies again over the same bytes
    assert not store.exists(UPLOAD) and _read(store, final) == segment_file.read_bytes()


def test_a_failed_delete_after_the_copy_still_counts_as_moved(
    object_store, segment_file, monkeypatch, caplog
):
    store, final = object_store, object_store.segment_key("t", "s")
    store.publish(segment_file, UPLOAD)

    def refuse(path):
        raise PermissionError(f"{path}: delete refused")

    with monkeypatch.context() as patched:
        patched.setattr(store.fs, "rm_file", refuse)
        assert store.move(UPLOAD, final) == store.uri_for(final)
    assert _read(store, final) == segment_file.read_bytes()
    assert store.exists(UPLOAD)  # left to the callers' clean-up
    assert "cannot delete the source" in caplog.text


@pytest.mark.skipif(
    not os.environ.get("S3_TEST_ENDPOINT"),
    reason="S3_TEST_ENDPOINT is not set (S3 deep store tests need a real S3-compatible endpoint)",
)
def test_s3_round_trip(segment_file, tmp_path):
    bucket = os.environ.get("S3_TEST_BUCKET", "pinot-test")
    store = DeepStore.from_uri(
        f"s3://{bucket}/test-{uuid.uuid4().hex[:12]}",
        endpoint_url=os.environ["S3_TEST_ENDPOINT"],
        key=os.environ.get("S3_TEST_KEY"),
        secret=os.environ.get("S3_TEST_SECRET"),
    )
    key, upload = store.segment_key("t", "s"), f"t/s.tmp.{uuid.uuid4()}"
    assert store.publish(segment_file, upload).startswith(f"s3://{bucket}/")
    try:
        assert store.move(upload, key) == store.uri_for(key)  # a server-side copy, then delete
        assert not store.exists(upload)
        assert store.exists(key) and store.size(key) == segment_file.stat().st_size
        assert store.download(key, tmp_path / "copy").read_bytes() == segment_file.read_bytes()
        with pytest.raises(FileNotFoundError):
            store.move(upload, key)
    finally:
        store.delete(key)
        store.delete(upload)
    assert not store.exists(key)


def test_the_configured_store_is_made_once_per_uri(settings, tmp_path):
    from tables import builds

    settings.DEEP_STORE_ENDPOINT_URL = ""
    settings.DEEP_STORE_URI = (tmp_path / "first").as_uri()
    first = builds.deep_store()
    assert builds.deep_store() is first  # no root resolution per call
    assert first.root == str((tmp_path / "first").resolve()) and (tmp_path / "first").is_dir()

    settings.DEEP_STORE_URI = (tmp_path / "second").as_uri()
    second = builds.deep_store()
    assert second is not first and second.root == str((tmp_path / "second").resolve())
    settings.DEEP_STORE_URI = (tmp_path / "first").as_uri()
    assert builds.deep_store() is first
