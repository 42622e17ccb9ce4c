"""`manage.py produce` against the real test Redis (keys under the test's own prefix)."""

from __future__ import annotations

import json
import re
import uuid
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tables.streams.producer import partition_for_key
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tests import envdefaults

pytestmark = pytest.mark.redis

FIXTURES = envdefaults.PINOT_FIXTURES
GITHUB_EVENTS = FIXTURES / "githubEvents_2021-07-21-few-hours.json"
GITHUB_SCHEMA = FIXTURES / "githubEvents_schema.json"


@pytest.fixture
def topic() -> str:
    return f"gh-{uuid.uuid4().hex[:10]}"


def produce(redis_prefix: str, **options) -> str:
    out = StringIO()
    call_command("produce", key_prefix=redis_prefix, stdout=out, **options)
    return out.getvalue()


def messages(redis_client, redis_prefix, topic) -> dict[int, list[bytes]]:
    provider = RedisStreamProvider(redis_client, topic, redis_prefix)
    by_partition = {}
    for p in range(provider.partition_count()):
        batch = provider.fetch(p, 1, 1_000_000, timeout_ms=0)
        assert [m.offset for m in batch.messages] == list(range(1, len(batch.messages) + 1))
        by_partition[p] = [m.value for m in batch.messages]
    return by_partition


def file_lines() -> list[str]:
    return [line for line in GITHUB_EVENTS.read_text(encoding="utf-8").splitlines() if line]


def test_the_github_events_file_lands_exactly_once_with_unique_keys(
    redis_client, redis_prefix, topic
):
    lines = file_lines()
    out = produce(redis_prefix, topic=topic, partitions=4, rate=0, file=str(GITHUB_EVENTS))

    produced = messages(redis_client, redis_prefix, topic)
    rows = []
    for partition, values in produced.items():
        for value in values:
            row = json.loads(value)
            assert partition_for_key(row["__key"], 4) == partition
            rows.append(row)
    assert len(rows) == len(lines) == 800
    assert sorted(row["__key"] for row in rows) == list(range(len(lines)))
    # Every row of the file, once, unchanged apart from its key.
    by_key = {row.pop("__key"): row for row in rows}
    assert [by_key[k] for k in range(len(lines))] == [json.loads(line) for line in lines]
    assert all(values for values in produced.values())  # the keys spread over all partitions
    assert f"created topic {topic!r} with 4 partitions" in out
    assert re.search(rf"^done: 800 rows to topic {topic!r} \(4 partitions\)", out, re.M)


def test_rows_that_carry_the_key_field_keep_it_and_their_text(redis_client, redis_prefix, topic):
    produce(
        redis_prefix, topic=topic, partitions=3, rate=0, file=str(GITHUB_EVENTS), key_field="id"
    )
    produced = messages(redis_client, redis_prefix, topic)
    lines = file_lines()
    assert sorted(v.decode() for values in produced.values() for v in values) == sorted(lines)
    for partition, values in produced.items():
        assert all(partition_for_key(json.loads(v)["id"], 3) == partition for v in values)


def test_count_stops_a_file_replay_early(redis_client, redis_prefix, topic):
    out = produce(
        redis_prefix, topic=topic, partitions=2, rate=0, file=str(GITHUB_EVENTS), count=50
    )
    produced = messages(redis_client, redis_prefix, topic)
    assert sum(len(values) for values in produced.values()) == 50
    assert "done: 50 rows" in out


def test_schema_rows_match_the_schema(redis_client, redis_prefix, topic):
    produce(redis_prefix, topic=topic, partitions=2, rate=0, schema=str(GITHUB_SCHEMA), count=30)
    rows = [
        json.loads(v)
        for values in messages(redis_client, redis_prefix, topic).values()
        for v in values
    ]
    assert len(rows) == 30
    assert sorted(row["__key"] for row in rows) == list(range(30))
    for row in rows:
        assert set(row) == {"__key", "id", "type", "created_at", "created_at_timestamp"}
        assert isinstance(row["id"], str) and isinstance(row["type"], str)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000", row["created_at"])
        assert isinstance(row["created_at_timestamp"], int)


def test_partitions_grow_but_never_shrink(redis_client, redis_prefix, topic):
    produce(redis_prefix, topic=topic, partitions=2, rate=0, file=str(GITHUB_EVENTS), count=10)
    out = produce(
        redis_prefix, topic=topic, partitions=5, rate=0, file=str(GITHUB_EVENTS), count=10
    )
    assert f"topic {topic!r}: partitions 2 -> 5" in out
    admin = RedisTopicAdmin(redis_client, redis_prefix)
    assert admin.partition_count(topic) == 5
    with pytest.raises(CommandError, match="has 5 partitions; refusing to decrease it to 3"):
        produce(redis_prefix, topic=topic, partitions=3, rate=0, file=str(GITHUB_EVENTS))
    assert admin.partition_count(topic) == 5
    assert sum(len(v) for v in messages(redis_client, redis_prefix, topic).values()) == 20


def test_a_malformed_file_is_refused_before_anything_is_produced(
    redis_client, redis_prefix, topic, tmp_path
):
    bad = tmp_path / "rows.json"
    bad.write_text('{"a": 1}\n{"a": 2\n', encoding="utf-8")
    with pytest.raises(CommandError, match="line 2"):
        produce(redis_prefix, topic=topic, partitions=1, rate=0, file=str(bad))
    assert not RedisTopicAdmin(redis_client, redis_prefix).topic_exists(topic)


def test_file_and_schema_are_exclusive(redis_prefix, topic):
    with pytest.raises(CommandError):
        produce(
            redis_prefix,
            topic=topic,
            partitions=1,
            rate=0,
            file=str(GITHUB_EVENTS),
            schema=str(GITHUB_SCHEMA),
        )


def test_keys_stay_unique_across_runs_into_one_topic(redis_client, redis_prefix, topic):
    for _ in range(2):
        produce(redis_prefix, topic=topic, partitions=3, rate=0, file=str(GITHUB_EVENTS), count=50)
    produced = messages(redis_client, redis_prefix, topic)
    keys = [json.loads(value)["__key"] for values in produced.values() for value in values]
    assert sorted(keys) == list(range(100))
