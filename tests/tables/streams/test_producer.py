"""Row sources, keys and pacing of the producer, with a fake clock and an in-memory topic."""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from tables.streams.base import StreamUnavailable, TopicAdmin, TopicNotFound
from tables.streams.producer import (
    Producer,
    SourceRow,
    keyed_value,
    partition_for_key,
    read_rows,
    synthetic_rows,
    time_value,
)
from tests import envdefaults

FIXTURES = envdefaults.PINOT_FIXTURES
NOW_MS = 1_626_847_200_123  # 2021-07-21T06:00:00.123Z


class FakeClock:
    """Monotonic time that only moves when the producer sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds


class MemoryAdmin(TopicAdmin):
    """An in-memory topic that records when (on the fake clock) each batch arrived."""

    def __init__(self, clock: FakeClock, partitions: int) -> None:
        self.clock = clock
        self.logs: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.calls: list[tuple[float, int]] = []  # (clock time, rows in the call)
        self.batch_ids: list[str | None] = []
        self.outages = 0  # the next N calls fail as if Redis were stalled

    def create_topic(self, topic: str, partitions: int) -> None:
        raise NotImplementedError

    def add_partitions(self, topic: str, new_count: int) -> None:
        raise NotImplementedError

    def partition_count(self, topic: str) -> int:
        return len(self.logs)

    def topic_exists(self, topic: str) -> bool:
        return True

    def produce(self, topic: str, partition: int, values: list[bytes], now_ms: int) -> list[int]:
        if partition not in self.logs:
            raise TopicNotFound(topic)
        log = self.logs[partition]
        log.extend(values)
        return list(range(len(log) - len(values) + 1, len(log) + 1))

    def produce_many(
        self,
        topic: str,
        batches: Mapping[int, list[bytes]],
        now_ms: int,
        batch_id: str | None = None,
    ) -> dict[int, list[int]]:
        self.calls.append((self.clock(), sum(len(v) for v in batches.values())))
        self.batch_ids.append(batch_id)
        if self.outages:
            self.outages -= 1
            raise StreamUnavailable("Redis is not reachable: stalled")
        return super().produce_many(topic, batches, now_ms)

    def trim_before(self, topic: str, partition: int, offset: int) -> int:
        raise NotImplementedError

    def delete_topic(self, topic: str) -> bool:
        raise NotImplementedError

    def rows(self) -> list[dict]:
        return [json.loads(v) for log in self.logs.values() for v in log]


def make_producer(clock: FakeClock, admin: MemoryAdmin, **kwargs) -> Producer:
    return Producer(
        admin,
        "t",
        len(admin.logs),
        clock=clock,
        sleep=clock.sleep,
        wall_ms=lambda: NOW_MS,
        **kwargs,
    )


def plain_rows(n: int) -> list[dict]:
    return [{"n": i} for i in range(n)]


def test_a_paced_run_never_sends_a_row_before_it_is_due():
    clock = FakeClock()
    admin = MemoryAdmin(clock, 3)
    stats = make_producer(clock, admin, rate=10, count=25).run(plain_rows(100))
    assert stats.rows == 25
    sent = 0
    for at, rows in admin.calls:
        for k in range(sent, sent + rows):  # row k is due k / rate seconds after the start
            assert at - 100.0 >= k / 10 - 1e-9
        sent += rows
    assert clock.now - 100.0 == pytest.approx(2.4)  # the last row (k=24) went when it was due
    assert sum(len(log) for log in admin.logs.values()) == 25


def test_a_producer_behind_schedule_catches_up_in_batches():
    clock = FakeClock()
    admin = MemoryAdmin(clock, 2)
    producer = make_producer(clock, admin, rate=1000, count=30, batch_size=8)
    original = admin.produce_many

    def slow(topic, batches, now_ms, batch_id=None):  # each round trip takes 0.1 s of fake time
        clock.now += 0.1
        return original(topic, batches, now_ms, batch_id)

    admin.produce_many = slow
    producer.run(plain_rows(30))
    assert [rows for _, rows in admin.calls] == [1, 8, 8, 8, 5]
    assert clock.sleeps == []


def test_rate_zero_sends_full_batches_without_sleeping():
    clock = FakeClock()
    admin = MemoryAdmin(clock, 4)
    stats = make_producer(clock, admin, rate=0, batch_size=40).run(plain_rows(100))
    assert [rows for _, rows in admin.calls] == [40, 40, 20]
    assert clock.sleeps == []
    assert stats.rows == 100 and sum(stats.per_partition.values()) == 100


def test_progress_is_reported_at_most_once_a_second():
    clock = FakeClock()
    admin = MemoryAdmin(clock, 2)
    seen: list[tuple[float, int]] = []
    producer = make_producer(
        clock, admin, rate=20, count=70, on_progress=lambda s: seen.append((clock.now, s.rows))
    )
    producer.run(plain_rows(70))
    times = [at for at, _ in seen]
    assert len(times) == 3  # 3.45 s of fake time
    assert all(b - a >= 1.0 for a, b in zip([100.0, *times], times, strict=False))
    assert [rows for _, rows in seen] == sorted(rows for _, rows in seen)


def test_every_row_gets_a_unique_key_and_the_partition_of_its_key():
    clock = FakeClock()
    admin = MemoryAdmin(clock, 3)
    source = [{"n": 0}, {"n": 1, "__key": "own"}, {"n": 2, "__key": None}, {"n": 3}]
    stats = make_producer(clock, admin, rate=0).run(source)
    keys = {row["n"]: row["__key"] for row in admin.rows()}
    assert keys == {0: 0, 1: "own", 2: 2, 3: 3}
    for partition, log in admin.logs.items():
        for value in log:
            assert partition_for_key(json.loads(value)["__key"], 3) == partition
    assert stats.next_offsets == {p: len(log) + 1 for p, log in admin.logs.items() if log}


def test_partitions_come_from_crc32_of_the_key_text():
    assert partition_for_key("abc", 7) == zlib.crc32(b"abc") % 7
    assert partition_for_key(12, 5) == zlib.crc32(b"12") % 5


def test_file_rows_are_replayed_as_written(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('{"price":1500.00, "b":1}\n\n  {"k":"x","price":2}\n{}\n', encoding="utf-8")
    rows = list(read_rows(path))
    assert [r.text for r in rows] == ['{"price":1500.00, "b":1}', '{"k":"x","price":2}', "{}"]
    assert keyed_value(rows[0], "__key", 7) == (7, b'{"__key":7,"price":1500.00, "b":1}')
    assert keyed_value(rows[1], "k", 8) == ("x", b'{"k":"x","price":2}')
    assert keyed_value(rows[2], "__key", 9) == (9, b'{"__key":9}')


def test_a_json_array_file_is_read_too(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[ {"a": 1},\n {"a": 2.50} ]\n', encoding="utf-8")
    rows = list(read_rows(path))
    assert [r.fields for r in rows] == [{"a": 1}, {"a": 2.5}]
    assert [r.text for r in rows] == ['{"a": 1}', '{"a": 2.50}']
    (tmp_path / "empty.json").write_text("[]", encoding="utf-8")
    assert list(read_rows(tmp_path / "empty.json")) == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"a": 1}\n{"a": ', "line 2 column 7: Expecting value"),
        ('{"a": 1}\n[1, 2]\n', "line 2: expected a JSON object"),
        ('[{"a": 1} {"a": 2}]', "expected ',' or ']'"),
    ],
)
def test_a_malformed_file_names_the_line(tmp_path, text, error):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(error)):
        list(read_rows(path))


def test_the_github_events_fixture_reads_as_json_lines():
    path = FIXTURES / "githubEvents_2021-07-21-few-hours.json"
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = list(read_rows(path))
    assert len(rows) == len(lines)
    assert [r.text for r in rows] == lines


def test_schema_rows_match_the_github_events_schema():
    schema = json.loads((FIXTURES / "githubEvents_schema.json").read_text(encoding="utf-8"))
    rows = synthetic_rows(schema, lambda: NOW_MS, random.Random(1), skip=("__key",))
    for row in (next(rows).fields for _ in range(5)):
        assert set(row) == {"id", "type", "created_at", "created_at_timestamp"}
        assert isinstance(row["id"], str) and isinstance(row["type"], str)
        assert row["created_at"] == "2021-07-21T06:00:00+0000"  # yyyy-MM-dd'T'HH:mm:ssZ
        assert row["created_at_timestamp"] == NOW_MS  # TIMESTAMP: epoch millis


def test_schema_rows_have_one_value_per_data_type():
    schema = {
        "dimensionFieldSpecs": [
            {"name": "i", "dataType": "INT"},
            {"name": "s", "dataType": "STRING"},
            {"name": "b", "dataType": "BOOLEAN"},
            {"name": "j", "dataType": "JSON"},
            {"name": "by", "dataType": "BYTES"},
            {"name": "mv", "dataType": "LONG", "singleValueField": False},
        ],
        "metricFieldSpecs": [
            {"name": "f", "dataType": "FLOAT"},
            {"name": "d", "dataType": "DOUBLE"},
            {"name": "l", "dataType": "LONG"},
        ],
        "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "EPOCH|MILLISECONDS"}],
    }
    row = next(synthetic_rows(schema, lambda: NOW_MS, random.Random(2))).fields
    assert type(row["i"]) is int and type(row["l"]) is int
    assert isinstance(row["f"], float) and isinstance(row["d"], float)
    assert isinstance(row["s"], str) and isinstance(row["b"], bool)
    assert isinstance(row["j"], dict)
    assert bytes.fromhex(row["by"])
    assert isinstance(row["mv"], list) and all(type(v) is int for v in row["mv"])
    assert row["ts"] == NOW_MS
    with pytest.raises(ValueError, match="not supported"):
        next(synthetic_rows({"dimensionFieldSpecs": [{"name": "x", "dataType": "MAP"}]}, int))


@pytest.mark.parametrize(
    ("data_type", "fmt", "expected"),
    [
        ("LONG", "1:MILLISECONDS:EPOCH", NOW_MS),
        ("LONG", "EPOCH|MILLISECONDS", NOW_MS),
        ("LONG", "EPOCH|MILLISECONDS|1", NOW_MS),
        ("LONG", "1:SECONDS:EPOCH", NOW_MS // 1000),
        ("INT", "1:DAYS:EPOCH", NOW_MS // 86_400_000),
        ("LONG", "5:MINUTES:EPOCH", NOW_MS // 300_000),
        ("TIMESTAMP", "1:MILLISECONDS:TIMESTAMP", NOW_MS),
        ("STRING", "1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd", "20210721"),
        ("STRING", "SIMPLE_DATE_FORMAT|yyyy-MM-dd HH:mm:ss.SSS", "2021-07-21 06:00:00.123"),
        ("LONG", "1:HOURS:SOMETHING_ELSE", NOW_MS),  # unknown: epoch millis
        ("STRING", "1:DAYS:SIMPLE_DATE_FORMAT:yyyy-QQ", str(NOW_MS)),  # unknown letter
    ],
)
def test_time_columns_get_now_in_their_format(data_type, fmt, expected):
    assert time_value(data_type, fmt, NOW_MS) == expected


def test_the_fixed_now_is_what_the_tests_think_it_is():
    moment = datetime.fromtimestamp(NOW_MS / 1000, tz=UTC)
    assert moment.isoformat(timespec="milliseconds") == "2021-07-21T06:00:00.123+00:00"


def test_rows_may_be_plain_mappings_or_source_rows():
    clock = FakeClock()
    admin = MemoryAdmin(clock, 1)
    make_producer(clock, admin, rate=0).run([{"a": 1}, SourceRow({"a": 2}, '{"a": 2}')])
    assert admin.logs[0] == [b'{"__key":0,"a":1}', b'{"__key":1,"a": 2}']


def test_a_stream_outage_is_ridden_out_with_capped_back_off_and_one_batch_id():
    clock = FakeClock()
    admin = MemoryAdmin(clock, 2)
    admin.outages = 8
    stats = make_producer(clock, admin, count=10, retry_cap_s=2.0).run(plain_rows(10))
    assert stats.rows == 10 and sum(len(log) for log in admin.logs.values()) == 10
    assert clock.sleeps == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 2.0]
    assert len(set(admin.batch_ids)) == 1 and admin.batch_ids[0] is not None


def test_a_producer_told_to_give_up_raises_after_that_long():
    clock = FakeClock()
    admin = MemoryAdmin(clock, 2)
    admin.outages = 1000
    producer = make_producer(clock, admin, count=10, retry_cap_s=1.0, give_up_after_s=5.0)
    with pytest.raises(StreamUnavailable):
        producer.run(plain_rows(10))
    assert 5.0 <= clock.now - 100.0 <= 6.0
    assert producer.stats.rows == 0
