"""The embedded Redis Streams plugin against the real test Redis."""

from __future__ import annotations

import threading
import uuid

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tables.streams import (
    StreamError,
    TopicExists,
    TopicNotFound,
    UnknownStreamType,
    fetch_timeout_ms,
    offset_reset_criteria,
    provider_for,
    stream_types,
)
from tables.streams.redis_streams import FIRST_OFFSET, RedisStreamProvider, RedisTopicAdmin
from tests.poll import wait_until

pytestmark = pytest.mark.redis

NOW_MS = 1_626_847_200_000


@pytest.fixture
def admin(redis_client, redis_prefix) -> RedisTopicAdmin:
    return RedisTopicAdmin(redis_client, redis_prefix)


@pytest.fixture
def topic(admin) -> str:
    admin.create_topic("events", 2)
    return "events"


@pytest.fixture
def provider(redis_client, redis_prefix, topic) -> RedisStreamProvider:
    return RedisStreamProvider(redis_client, topic, redis_prefix)


def values(n: int, start: int = 0) -> list[bytes]:
    return [f"row-{i}".encode() for i in range(start, start + n)]


def read_all(provider: RedisStreamProvider, partition: int) -> list[tuple[int, bytes]]:
    batch = provider.fetch(partition, FIRST_OFFSET, 100_000, timeout_ms=0)
    return [(m.offset, m.value) for m in batch.messages]


def test_offsets_start_at_one_and_are_contiguous_per_partition(admin, topic, provider):
    assert admin.produce(topic, 0, values(3), NOW_MS) == [1, 2, 3]
    assert admin.produce(topic, 1, values(2), NOW_MS) == [1, 2]
    assert admin.produce(topic, 0, values(2, start=3), NOW_MS + 1) == [4, 5]
    assert read_all(provider, 0) == list(zip(range(1, 6), values(5), strict=True))
    assert [m.timestamp_ms for m in provider.fetch(0, 1, 10, 0).messages] == [NOW_MS] * 3 + [
        NOW_MS + 1
    ] * 2


def test_earliest_and_latest_on_empty_and_filled_partitions(admin, topic, provider):
    assert (provider.earliest_offset(0), provider.latest_offset(0)) == (1, 1)
    admin.produce(topic, 0, values(4), NOW_MS)
    assert (provider.earliest_offset(0), provider.latest_offset(0)) == (1, 5)
    assert (provider.earliest_offset(1), provider.latest_offset(1)) == (1, 1)


def test_fetch_from_the_middle_and_with_max_messages(admin, topic, provider):
    admin.produce(topic, 0, values(6), NOW_MS)
    middle = provider.fetch(0, 3, 100, timeout_ms=0)
    assert [m.offset for m in middle.messages] == [3, 4, 5, 6]
    assert (middle.next_offset, middle.first_available_offset, middle.data_loss) == (7, 1, False)

    first = provider.fetch(0, 1, 2, timeout_ms=0)
    assert [m.value for m in first.messages] == values(2)
    second = provider.fetch(0, first.next_offset, 2, timeout_ms=0)
    assert [m.offset for m in second.messages] == [3, 4]


def test_a_caught_up_fetch_returns_an_empty_batch_after_its_timeout(admin, topic, provider):
    admin.produce(topic, 0, values(2), NOW_MS)
    batch = provider.fetch(0, 3, 10, timeout_ms=50)
    assert batch.messages == []
    assert (batch.next_offset, batch.first_available_offset, batch.data_loss) == (3, 1, False)


def test_a_blocking_fetch_returns_what_another_thread_produces(
    admin, topic, provider, redis_client
):
    result = {}

    def consume() -> None:
        result["batch"] = provider.fetch(1, provider.latest_offset(1), 10, timeout_ms=60_000)

    consumer = threading.Thread(target=consume)
    consumer.start()
    # Make it likely that the fetch is already blocked in XREAD; the result is the same either way.
    # CLIENT LIST is server-wide: count only this session's database (TEST_SLOT), so that
    # another pytest session's consumers blocked in XREAD do not satisfy the wait.
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
    wait_until(
        lambda: any(
            c.get("cmd") == "xread" and str(c.get("db")) == db for c in redis_client.client_list()
        ),
        timeout=10,
        what="a client blocked in XREAD",
    )
    admin.produce(topic, 1, [b"late"], NOW_MS)
    consumer.join(timeout=60)
    assert not consumer.is_alive()
    batch = result["batch"]
    assert [(m.offset, m.value) for m in batch.messages] == [(1, b"late")]
    assert (batch.next_offset, batch.data_loss) == (2, False)


def _blocked_in_xread(redis_client) -> bool:
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
    return any(
        c.get("cmd") == "xread" and str(c.get("db")) == db for c in redis_client.client_list()
    )


def test_a_woken_partition_ends_its_blocked_fetch_at_once(admin, topic, provider, redis_client):
    """The fetch would wait 10 minutes: only `wake` can end it within the join's deadline. A
    wake of the other partition does not; a wake before a fetch does not end a later one."""
    provider.wake(1)  # before the fetch: no effect on it
    result = {}

    def consume() -> None:
        result["batch"] = provider.fetch(1, 1, 10, timeout_ms=600_000)

    consumer = threading.Thread(target=consume)
    consumer.start()
    wait_until(lambda: _blocked_in_xread(redis_client), timeout=10, what="blocked in XREAD")
    provider.wake(0)
    consumer.join(timeout=0.3)
    assert consumer.is_alive()  # partition 0's wake is not this fetch's
    provider.wake(1)
    consumer.join(timeout=30)
    assert not consumer.is_alive()
    assert result["batch"].messages == [] and result["batch"].next_offset == 1
    # The connection went back to the pool unharmed: the next calls work.
    admin.produce(topic, 1, [b"next"], NOW_MS)
    assert [m.value for m in provider.fetch(1, 1, 10, timeout_ms=1000).messages] == [b"next"]


def test_waking_many_partitions_ends_each_blocked_fetch_in_one_call(provider, redis_client):
    """A force commit of many segments wakes their fetches at once (`wake_many`: the unblocks in
    one pipeline); each fetch returns empty, at once."""
    results: dict[int, object] = {}

    def consume(partition: int) -> None:
        results[partition] = provider.fetch(partition, 1, 10, timeout_ms=600_000)

    consumers = [threading.Thread(target=consume, args=(p,)) for p in (0, 1)]
    for consumer in consumers:
        consumer.start()
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
    wait_until(
        lambda: (
            sum(
                c.get("cmd") == "xread" and str(c.get("db")) == db
                for c in redis_client.client_list()
            )
            >= 2
        ),
        timeout=10,
        what="both fetches blocked in XREAD",
    )
    provider.wake_many([0, 1])
    for consumer in consumers:
        consumer.join(timeout=30)
        assert not consumer.is_alive()
    assert {p: b.messages for p, b in results.items()} == {0: [], 1: []}
    provider.wake_many([])  # nothing to wake: no call at all


def test_a_user_whose_acl_refuses_client_still_fetches(admin, topic, redis_prefix, redis_client):
    user = f"no-client-{uuid.uuid4().hex[:8]}"
    redis_client.acl_setuser(
        user,
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-client"],
    )
    try:
        kwargs = redis_client.connection_pool.connection_kwargs
        client = redis.Redis(
            host=kwargs["host"],
            port=kwargs["port"],
            db=kwargs.get("db", 0),
            username=user,
            password="pw",
        )
        provider = RedisStreamProvider(client, topic, redis_prefix)
        assert provider.fetch(0, 1, 10, timeout_ms=50).messages == []  # waited, without an id
        admin.produce(topic, 0, [b"row"], NOW_MS)
        assert [m.value for m in provider.fetch(0, 1, 10, timeout_ms=50).messages] == [b"row"]
        provider.wake(0)  # CLIENT UNBLOCK refused too: nothing happens
        client.close()
    finally:
        redis_client.acl_deluser(user)


def test_a_blocking_fetch_may_outlast_the_client_socket_timeout(topic, redis_prefix, settings):
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.5)
    provider = RedisStreamProvider(client, topic, redis_prefix)
    # One XREAD BLOCK 1200 would hit the 0.5 s socket timeout; the plugin waits in slices.
    batch = provider.fetch(0, 1, 10, timeout_ms=1200)
    assert batch.messages == []
    assert (batch.next_offset, batch.data_loss) == (1, False)
    client.close()


def test_exact_trim_then_a_fetch_from_a_trimmed_offset_reports_data_loss(admin, topic, provider):
    admin.produce(topic, 0, values(250), NOW_MS)
    assert admin.trim_before(topic, 0, 101) == 100  # exact: approximate trimming would drop 0
    assert (provider.earliest_offset(0), provider.latest_offset(0)) == (101, 251)

    batch = provider.fetch(0, 40, 5, timeout_ms=0)
    assert batch.data_loss
    assert batch.first_available_offset == 101
    assert [m.offset for m in batch.messages] == [101, 102, 103, 104, 105]
    assert batch.next_offset == 106

    assert not provider.fetch(0, 101, 5, timeout_ms=0).data_loss
    assert admin.trim_before(topic, 0, 101) == 0


def test_a_partition_trimmed_to_nothing_reports_loss_and_skips_to_the_latest(
    admin, topic, provider
):
    admin.produce(topic, 0, values(10), NOW_MS)
    assert admin.trim_before(topic, 0, 11) == 10
    assert (provider.earliest_offset(0), provider.latest_offset(0)) == (11, 11)
    batch = provider.fetch(0, 4, 10, timeout_ms=20)
    assert batch.messages == []
    assert (batch.next_offset, batch.first_available_offset, batch.data_loss) == (11, 11, True)
    # Offsets keep counting after a full trim: nothing is ever reused.
    assert admin.produce(topic, 0, [b"next"], NOW_MS) == [11]


def test_increasing_the_partition_count_keeps_old_data(admin, topic, provider):
    admin.produce(topic, 0, values(3), NOW_MS)
    admin.produce(topic, 1, values(2), NOW_MS)
    admin.add_partitions(topic, 4)
    assert provider.partition_count() == 4
    assert read_all(provider, 0) == list(zip([1, 2, 3], values(3), strict=True))
    assert [o for o, _ in read_all(provider, 1)] == [1, 2]
    assert admin.produce(topic, 3, [b"new"], NOW_MS) == [1]
    for bad in (4, 3):
        with pytest.raises(ValueError, match="only increase"):
            admin.add_partitions(topic, bad)


def test_topics_are_created_once_and_deleted_with_their_data(admin, topic, redis_client):
    with pytest.raises(TopicExists):
        admin.create_topic(topic, 3)
    admin.produce(topic, 1, values(2), NOW_MS)
    assert admin.topic_exists(topic)
    assert admin.delete_topic(topic)
    assert not admin.topic_exists(topic)
    assert not admin.delete_topic(topic)
    with pytest.raises(TopicNotFound):
        admin.produce(topic, 0, [b"x"], NOW_MS)


def test_unknown_topics_and_partitions_are_refused(admin, topic, provider, redis_client):
    with pytest.raises(ValueError, match="no partition 2"):
        admin.produce(topic, 2, [b"x"], NOW_MS)
    with pytest.raises(ValueError, match="no partition 2"):
        provider.fetch(2, 1, 10, timeout_ms=0)
    with pytest.raises(ValueError, match="no partition 5"):
        provider.latest_offset(5)
    missing = RedisStreamProvider(redis_client, "missing", "unused:")
    with pytest.raises(TopicNotFound):
        missing.partition_count()
    with pytest.raises(TopicNotFound):
        missing.fetch(0, 1, 10, timeout_ms=0)


def test_offset_for_criteria(admin, topic, provider):
    admin.produce(topic, 0, values(5), NOW_MS)
    admin.trim_before(topic, 0, 3)
    assert provider.offset_for_criteria(0, "smallest") == 3
    assert provider.offset_for_criteria(0, "LARGEST") == 6
    with pytest.raises(ValueError, match="not supported"):
        provider.offset_for_criteria(0, "2d")


def test_concurrent_producers_never_share_an_offset(admin, topic, provider):
    threads, batches, size = 8, 20, 5

    def produce(worker: int) -> None:
        for b in range(batches):
            admin.produce(topic, 0, [f"{worker}:{b}:{i}".encode() for i in range(size)], NOW_MS)

    workers = [threading.Thread(target=produce, args=(w,)) for w in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    messages = read_all(provider, 0)
    total = threads * batches * size
    assert [offset for offset, _ in messages] == list(range(1, total + 1))
    assert len({value for _, value in messages}) == total
    # Each batch is atomic: its messages got contiguous offsets.
    by_batch: dict[bytes, list[int]] = {}
    for offset, value in messages:
        by_batch.setdefault(value.rsplit(b":", 1)[0], []).append(offset)
    assert all(o == list(range(o[0], o[0] + size)) for o in by_batch.values())


def test_provider_for_builds_the_redis_plugin_from_a_stream_config(
    admin, topic, redis_prefix, settings
):
    admin.produce(topic, 1, values(2), NOW_MS)
    config = {
        "streamType": "redis",
        "stream.redis.topic.name": topic,
        "stream.redis.key.prefix": redis_prefix,
        "stream.redis.consumer.prop.auto.offset.reset": "smallest",
    }
    provider = provider_for(config, settings.REDIS_URL)
    assert provider.partition_count() == 2
    assert provider.offset_for_criteria(1, offset_reset_criteria(config)) == 1
    assert provider.latest_offset(1) == 3
    assert fetch_timeout_ms(config) == 5000
    assert fetch_timeout_ms({**config, "stream.redis.fetch.timeout.millis": "250"}) == 250
    assert offset_reset_criteria({"streamType": "redis"}) == "largest"
    provider.close()


def test_an_unknown_stream_type_names_the_known_ones(settings):
    assert "redis" in stream_types()
    config = {"streamType": "kinesis", "stream.kinesis.topic.name": "t"}
    with pytest.raises(UnknownStreamType) as caught:
        provider_for(config, settings.REDIS_URL)
    # Other plugins may be registered in this process; "redis" always is.
    message = str(caught.value)
    assert message.startswith("stream type 'kinesis' has no plugin in this installation (known: ")
    assert "redis" in message.rsplit("known: ", 1)[1]
    with pytest.raises(StreamError, match=r"stream\.redis\.topic\.name"):
        provider_for({"streamType": "redis"}, settings.REDIS_URL)
    with pytest.raises(StreamError, match="streamType"):
        provider_for({}, settings.REDIS_URL)


def test_a_batch_sent_again_with_its_id_is_not_written_twice(admin, topic, provider):
    first = admin.produce_many(topic, {0: values(3), 1: values(2)}, NOW_MS, batch_id="b1")
    again = admin.produce_many(topic, {0: values(3), 1: values(2)}, NOW_MS, batch_id="b1")
    assert first == again == {0: [1, 2, 3], 1: [1, 2]}
    assert admin.produce_many(topic, {0: values(1)}, NOW_MS, batch_id="b2") == {0: [4]}
    assert [offset for offset, _ in read_all(provider, 0)] == [1, 2, 3, 4]
    assert [offset for offset, _ in read_all(provider, 1)] == [1, 2]


def test_an_unreachable_redis_is_a_transient_stream_error(redis_prefix):
    from tables.streams import StreamUnavailable

    # No retries: redis-py's default (three, with back-off) makes each call take ~3 s here.
    dead = redis.Redis(
        host="127.0.0.1",
        port=1,
        socket_connect_timeout=1,
        socket_timeout=1,
        retry=Retry(NoBackoff(), 0),
    )
    provider = RedisStreamProvider(dead, "events", redis_prefix)
    for call in (
        provider.partition_count,
        lambda: provider.latest_offset(0),
        lambda: provider.fetch(0, FIRST_OFFSET, 10, timeout_ms=0),
        lambda: RedisTopicAdmin(dead, redis_prefix).produce_many("events", {0: [b"x"]}, 1),
    ):
        with pytest.raises(StreamUnavailable, match="Redis is not reachable"):
            call()


def test_a_redis_that_lost_its_scripts_is_a_transient_error_and_the_retry_writes_once(
    admin, topic, provider, redis_client
):
    from tables.streams import StreamUnavailable

    assert admin.produce_many(topic, {0: values(2)}, NOW_MS, batch_id="a") == {0: [1, 2]}
    original = admin._produce

    def without_loading(keys, args, client):  # as when redis-py re-sends after a restart
        client.evalsha(original.sha, len(keys), *keys, *args)

    redis_client.script_flush()
    admin._produce = without_loading
    with pytest.raises(StreamUnavailable, match="script is not loaded"):
        admin.produce_many(topic, {0: values(1, start=2)}, NOW_MS, batch_id="b")
    admin._produce = original
    assert admin.produce_many(topic, {0: values(1, start=2)}, NOW_MS, batch_id="b") == {0: [3]}
    assert [offset for offset, _ in read_all(provider, 0)] == [1, 2, 3]


def test_a_batch_with_a_gap_parses_every_offset_and_both_views_agree(
    admin, topic, provider, redis_client, redis_prefix
):
    admin.produce(topic, 0, values(5), NOW_MS)
    redis_client.xdel(f"{redis_prefix}{topic}:0", "0-3")  # deleted by hand: a gap mid-batch
    batch = provider.fetch(0, 1, 10, timeout_ms=0)
    assert list(batch.offsets) == [1, 2, 4, 5]
    assert list(batch.values) == [b"row-0", b"row-1", b"row-3", b"row-4"]
    assert list(batch.timestamps) == [NOW_MS] * 4
    assert [(m.offset, m.value, m.timestamp_ms) for m in batch.messages] == list(
        zip(batch.offsets, batch.values, batch.timestamps, strict=True)
    )
    assert (len(batch), batch.next_offset, batch.data_loss) == (4, 6, False)
    contiguous = provider.fetch(0, 4, 10, timeout_ms=0)
    assert list(contiguous.offsets) == [4, 5]
    assert contiguous.timestamps[-1] == NOW_MS


def test_entries_written_by_hand_are_read_by_field_name(
    topic, provider, redis_client, redis_prefix
):
    key = f"{redis_prefix}{topic}:1"
    redis_client.xadd(key, {"t": "7", "v": "second field"}, id="0-1")
    redis_client.xadd(key, {"other": "x"}, id="0-2")  # neither field: empty value, time 0
    batch = provider.fetch(1, 1, 10, timeout_ms=0)
    assert [(m.offset, m.value, m.timestamp_ms) for m in batch.messages] == [
        (1, b"second field", 7),
        (2, b"", 0),
    ]
    redis_client.xadd(key, {"v": "x"}, id="5-0")  # not an id of this plugin (0-<offset>)
    with pytest.raises(StreamError, match="not written by this plugin"):
        provider.fetch(1, 1, 10, timeout_ms=0)
