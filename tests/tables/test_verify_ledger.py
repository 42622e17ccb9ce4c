"""`manage.py verify_ledger` on a real cluster: ZooKeeper metadata, Redis stream, Spark-built
segments in a deep store of the test's own.

Partition 0 of the topic holds the fixture's unkeyed message at offset 1, then 20 githubEvents rows
keyed 0..19 at offsets 2..21. Each test commits segments of partition 0 by writing their DONE
metadata straight into ZooKeeper and, where rows are checked, building them in-process from the
stream and publishing them as the build task would.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.ledger import FILTERED_OFFSETS_FILE
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata, new_in_progress
from tables.domain.table_config import switch_stream_type
from tables.redisconn import get_redis
from tables.segments.builder import BuildRequest, build_from_stream
from tables.segments.segment_format import pack_segment, read_segment_files
from tables.streams.producer import SourceRow, keyed_value
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.records import create_record, update_record
from tests.cluster_fixtures import PATHS, github_rows, load

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.spark]

TABLE = "githubEvents"
KEYED_ROWS = 20


class Ledger:
    """Commits segments of partition 0 of the test's table."""

    def __init__(self, manager: ResourceManager, topic: str, spark, tmp_path, redis_url: str):
        self.manager, self.topic, self.spark = manager, topic, spark
        self.work, self.redis_url = tmp_path / "builds", redis_url
        first = [n for n in manager.segment_names(TABLE) if n.startswith(f"{TABLE}__0__0__")]
        self.first = LLCSegmentName.parse(first[0])

    def name(self, sequence: int) -> str:
        return str(LLCSegmentName.create(TABLE, 0, sequence, self.first.creation_time_ms))

    def commit(
        self,
        sequence: int,
        start: int,
        end: int,
        built: tuple[int, int] | None = None,
        publish: bool = True,
    ) -> str:
        """Mark segment `sequence` DONE over [start, end); build it from `built` when given."""
        name = self.name(sequence)
        facts = {
            "start_time_ms": 0,
            "end_time_ms": 0,
            "total_docs": end - start,
            "crc": 1,
            "data_crc": 1,
            "size_in_bytes": 1,
            "download_url": "",
        }
        if built is not None:
            config = self.manager.get_table_config(TABLE)
            schema = self.manager.get_schema(config.schema_name)
            request = BuildRequest(
                TABLE, name, schema.raw, config.rest, *built, self.first.creation_time_ms
            )
            result = build_from_stream(
                self.spark, request, config.stream_config, 0, self.work, self.redis_url
            )
            store = builds.deep_store()
            uri = store.uri_for(store.segment_key(TABLE, name))
            if publish:
                store.publish(result.tar_path, store.segment_key(TABLE, name))
            facts.update(
                start_time_ms=result.start_time_ms,
                end_time_ms=result.end_time_ms,
                total_docs=result.total_docs,
                crc=result.crc,
                data_crc=result.data_crc,
                size_in_bytes=result.size_bytes,
                download_url=uri,
            )
        path = PATHS.segment(f"{TABLE}_REALTIME", name)
        if sequence == 0:  # the consuming segment the table was created with
            update_record(
                self.manager.zk,
                path,
                lambda record: (
                    SegmentZKMetadata.from_znrecord(record)
                    .mark_done(end_offset=str(end), **facts)
                    .to_znrecord()
                ),
            )
        else:
            done = self.consuming(sequence, start, create=False).mark_done(
                end_offset=str(end), **facts
            )
            create_record(self.manager.zk, path, done.to_znrecord())
        return name

    def consuming(self, sequence: int, start: int, create: bool = True) -> SegmentZKMetadata:
        metadata = new_in_progress(self.name(sequence), str(start), 1, 100, 0)
        if create:
            path = PATHS.segment(f"{TABLE}_REALTIME", metadata.segment_name)
            create_record(self.manager.zk, path, metadata.to_znrecord())
        return metadata


@pytest.fixture
def ledger(servers, topic, spark, settings, tmp_path) -> Ledger:
    settings.DEEP_STORE_URI = (tmp_path / "deepstore").as_uri()
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    )
    messages = [
        keyed_value(SourceRow(json.loads(line), line.decode()), "__key", key)[1]
        for key, line in enumerate(github_rows()[:KEYED_ROWS])
    ]
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    assert admin.produce(topic, 0, messages, now_ms=0) == list(range(2, 2 + KEYED_ROWS))
    return Ledger(manager, topic, spark, tmp_path, settings.REDIS_URL)


def verify(*args: str) -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("verify_ledger", TABLE, *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def test_a_correct_ledger_passes_with_its_rows(ledger):
    first = ledger.commit(0, 1, 11, built=(1, 11))
    second = ledger.commit(1, 11, 22, built=(11, 22))
    ledger.consuming(2, 22)

    out, error = verify("--rows")
    assert error is None, out
    lines = out.splitlines()
    assert lines[0] == (
        f"ledger of {TABLE}: ok: 4 partitions, 2 DONE segments, 4 open, 21 rows checked"
    )
    assert not [line for line in lines if line.startswith("PROBLEM")]
    assert f"note: partition 0: open segment {ledger.name(2)} (from 22) is IN_PROGRESS" in lines
    # The topic fixture's first message carries no key: it is compared by offset only.
    assert "note: partition 0: 1 produced message without a key field" in out
    assert first != second

    out, error = verify()
    assert error is None and "ok: 4 partitions, 2 DONE segments, 4 open, 0 rows checked" in out


def test_rows_the_tables_filter_dropped_are_excused_and_only_those(ledger):
    config = ledger.manager.get_table_config(TABLE).rest
    config["ingestionConfig"]["filterConfig"] = {"filterFunction": "equals(type, 'PushEvent')"}
    ledger.manager.update_table(TABLE, config)
    ledger.commit(0, 1, 11, built=(1, 11))
    second = ledger.commit(1, 11, 22, built=(11, 22))  # rows 9..19: 4 PushEvents

    out, error = verify("--rows")
    assert error is None, out
    assert (
        f"note: partition 0: segment {second} [11, 22): 4 rows dropped by the table's filter "
        "(ingestionConfig.filterConfig): excused"
    ) in out.splitlines()
    assert "12 rows checked" in out.splitlines()[0]  # 21 offsets, 5 + 4 PushEvents dropped

    # Without its declaration, the segment's dropped rows are missing rows.
    store = builds.deep_store()
    key = store.segment_key(TABLE, second)
    packed = store.download(key, ledger.work / "declared.tar.gz")
    unpacked = ledger.work / "undeclared" / second
    unpacked.mkdir(parents=True)
    for name, data in read_segment_files(packed).items():
        if name != FILTERED_OFFSETS_FILE:
            (unpacked / name).write_bytes(data)
    pack_segment(unpacked, ledger.work / "undeclared.tar.gz")
    store.publish(ledger.work / "undeclared.tar.gz", key)
    out, error = verify("--rows")
    assert error is not None
    assert "PROBLEM partition 0: missing rows: offsets [15, 16) (1 offset)" in out
    assert "PROBLEM partition 0: missing rows: offsets [17, 20) (3 offsets)" in out


def test_a_gap_fails_and_names_the_offsets_unless_the_loss_was_counted(ledger):
    ledger.commit(0, 1, 11)
    ledger.commit(1, 15, 22)

    out, error = verify()
    assert error is not None
    assert "FAILED (1 problem)" in out.splitlines()[0]
    expected = (
        f"PROBLEM partition 0: gap: offsets [11, 15) (4 offsets) are in no segment: "
        f"{ledger.name(0)} ends at 11, {ledger.name(1)} [15, 22) starts at 15"
    )
    assert expected in out.splitlines()
    assert "gap: offsets [11, 15)" in str(error)

    out, error = verify("--lost", "0:11:15")
    assert error is None, out
    assert "before" in out and "gap excused" in out

    with pytest.raises(CommandError, match="PARTITION:FROM:TO"):
        call_command("verify_ledger", TABLE, "--lost", "0:11", stdout=StringIO())


def test_an_overlapping_segment_fails(ledger):
    ledger.commit(0, 1, 11)
    ledger.commit(1, 8, 22)
    with pytest.raises(CommandError, match="table noSuchTable not found"):
        call_command("verify_ledger", "noSuchTable", stdout=StringIO())

    out, error = verify()
    assert error is not None
    assert (
        f"PROBLEM partition 0: overlap: {ledger.name(1)} [8, 22) and {ledger.name(0)} both "
        "cover offsets [8, 11) (3 offsets)"
    ) in out.splitlines()


def test_a_segment_missing_from_the_deep_store_fails_with_rows(ledger):
    ledger.commit(0, 1, 11, built=(1, 11))
    missing = ledger.commit(1, 11, 22)  # committed, never published

    out, error = verify()
    assert error is None, out  # its range is fine

    out, error = verify("--rows")
    assert error is not None
    store = builds.deep_store()
    uri = store.uri_for(store.segment_key(TABLE, missing))
    assert (
        f"PROBLEM partition 0: segment {missing} [11, 22) cannot be read: not in the deep store "
        f"at {uri}; its offsets [11, 22) (11 offsets) are not verified"
    ) in out.splitlines()
    assert "FAILED (1 problem)" in out.splitlines()[0]
    assert "10 rows checked" in out.splitlines()[0]


def test_a_duplicated_row_fails_with_rows(ledger):
    # Segment 0 says [1, 11) but its data also holds offsets 11 and 12, which segment 1 holds too.
    first = ledger.commit(0, 1, 11, built=(1, 13))
    second = ledger.commit(1, 11, 22, built=(11, 22))

    out, error = verify()
    assert error is None, out  # the ranges alone look right

    out, error = verify("--rows")
    assert error is not None
    lines = out.splitlines()
    assert (
        f"PROBLEM partition 0: segment {first} [1, 11) holds rows at offsets [11, 13) "
        "(2 offsets) outside its range"
    ) in lines
    assert (
        f"PROBLEM partition 0: duplicated rows: offsets [11, 13) (2 offsets) are in 2 segments: "
        f"{first}, {second}, keys '9', '10'"
    ) in lines
    assert "23 rows checked" in lines[0]
