"""The test Redis: plain keys and the Streams commands the stream plugin will build on."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.redis


def test_it_sets_and_gets_under_the_test_prefix(redis_client, redis_prefix):
    redis_client.set(redis_prefix + "k", b"v")
    assert redis_client.get(redis_prefix + "k") == b"v"


def test_a_stream_keeps_order_and_offsets(redis_client, redis_prefix):
    key = redis_prefix + "topic-0"
    ids = [redis_client.xadd(key, {"row": str(i)}, id=f"0-{i + 1}") for i in range(5)]
    assert ids == [f"0-{i + 1}".encode() for i in range(5)]
    entries = redis_client.xrange(key, min="(0-2", max="+", count=2)
    assert [(eid, fields[b"row"]) for eid, fields in entries] == [(b"0-3", b"2"), (b"0-4", b"3")]
