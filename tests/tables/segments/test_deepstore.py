"""The deep store on file:// (S3 only against a real endpoint named by S3_TEST_ENDPOINT)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

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
    key = store.segment_key("t", "s")
    assert store.publish(segment_file, key).startswith(f"s3://{bucket}/")
    try:
        assert store.exists(key) and store.size(key) == segment_file.stat().st_size
        assert store.download(key, tmp_path / "copy").read_bytes() == segment_file.read_bytes()
    finally:
        store.delete(key)
    assert not store.exists(key)
