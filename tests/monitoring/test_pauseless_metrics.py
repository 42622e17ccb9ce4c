"""Controller-side /metrics of the deep-store repair and of re-ingestion (round 2 §B.2, §B.5,
§C.3): Pinot's meters `segmentMissingDeepStoreLink`, `llcSegmentsDeepStoreUploadRetrySuccess` and
`...RetryError` from the durable counters, and the global gauge
`reingestedSegmentUploadsInProgress` from the leases in the real Redis (`monitoring.in_progress`):
counted while held, in any process, renewed past their lease while the request runs, forgotten
when the process holding one is killed, unknown (no sample) while Redis cannot be read.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from monitoring.definitions import DEFINITIONS
from monitoring.in_progress import count_in_progress, in_progress, key_for
from tables.models import DurableCounter
from tables.redisconn import get_redis
from tests.monitoring.test_controller_metrics import labels, make_table, samples, scrape, types
from tests.poll import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
GAUGE = "pinot_controller_reingestedSegmentUploadsInProgress_Value"
METERS = (
    "segmentMissingDeepStoreLink",
    "llcSegmentsDeepStoreUploadRetrySuccess",
    "llcSegmentsDeepStoreUploadRetryError",
)


@pytest.fixture
def cluster_name(settings) -> Iterator[str]:
    """A cluster name of this test's own, so that no other test's leases count here."""
    settings.CLUSTER_NAME = f"Metrics{uuid.uuid4().hex[:10]}"
    yield settings.CLUSTER_NAME
    get_redis(settings.REDIS_URL).delete(key_for(settings.CLUSTER_NAME))


def gauge(client) -> dict:
    return samples(scrape(client))[GAUGE]


# --- the durable meters ---------------------------------------------------------------------------


def test_the_deep_store_meters_count_per_table_under_pinots_names(client, cluster_name) -> None:
    make_table("githubEvents", pauseless=True, topic="events")
    make_table("airlineStats", topic="flights")
    DurableCounter.increment("segmentMissingDeepStoreLink", "githubEvents", by=2)
    DurableCounter.increment("segmentMissingDeepStoreLink", "githubEvents_REALTIME")  # with type
    DurableCounter.increment("llcSegmentsDeepStoreUploadRetrySuccess", "githubEvents", by=3)
    DurableCounter.increment("llcSegmentsDeepStoreUploadRetryError", "airlineStats")
    DurableCounter.increment("llcSegmentsDeepStoreUploadRetryError", "gone")  # a deleted table

    text = scrape(client)
    got = samples(text)

    ev = labels(table="githubEvents", tableType="REALTIME")
    air = labels(table="airlineStats", tableType="REALTIME")
    assert got["pinot_controller_segmentMissingDeepStoreLink_Count"] == {ev: 3, air: 0}
    assert got["pinot_controller_llcSegmentsDeepStoreUploadRetrySuccess_Count"] == {ev: 3, air: 0}
    assert got["pinot_controller_llcSegmentsDeepStoreUploadRetryError_Count"] == {ev: 0, air: 1}
    for name in METERS:  # Pinot's meters keep `_Count`: untyped, never a `_total` counter
        assert types(text)[f"pinot_controller_{name}_Count"] == "untyped"
        assert DEFINITIONS[name].labels == ("table", "tableType")


# --- the uploads in progress ----------------------------------------------------------------------


def test_the_gauge_counts_the_requests_held_now_and_none_after(client, cluster_name) -> None:
    redis = get_redis(settings.REDIS_URL)
    assert gauge(client) == {(): 0}
    with in_progress(redis, cluster_name) as first:
        assert first
        assert gauge(client) == {(): 1}
        with in_progress(redis, cluster_name):
            assert gauge(client) == {(): 2}
        assert gauge(client) == {(): 1}
    assert gauge(client) == {(): 0}
    with pytest.raises(RuntimeError), in_progress(redis, cluster_name):
        raise RuntimeError("a request that failed")
    assert gauge(client) == {(): 0}
    assert redis.exists(key_for(cluster_name)) == 0  # nothing outlives the last request


def test_a_request_longer_than_its_lease_keeps_counting(cluster_name) -> None:
    redis = get_redis(settings.REDIS_URL)
    key = key_for(cluster_name)
    with in_progress(redis, cluster_name, lease_s=0.6):
        (member, first_deadline), *_ = redis.zrange(key, 0, -1, withscores=True)

        def past_the_first_lease() -> bool:
            seconds, micros = redis.time()
            assert count_in_progress(redis, cluster_name) == 1  # renewed all along
            return seconds * 1000 + micros // 1000 > first_deadline + 600

        wait_until(past_the_first_lease, timeout=30, interval=0.1, what="two leases gone by")
        assert redis.zscore(key, member) > first_deadline
    assert count_in_progress(redis, cluster_name) == 0


HOLDER = """
import sys, redis
from monitoring.in_progress import in_progress
client = redis.Redis.from_url(sys.argv[1])
with in_progress(client, sys.argv[2], lease_s=1.0):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_process_killed_mid_request_stops_counting_within_its_lease(client, cluster_name) -> None:
    """Another process (as another controller would) holds a request; SIGKILL leaves its lease
    to run out."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, settings.REDIS_URL, cluster_name],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert gauge(client) == {(): 1}
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        wait_until(lambda: gauge(client) == {(): 0}, timeout=30, what="the lease run out")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)


def test_without_redis_the_gauge_has_no_sample_and_requests_go_on(client, settings) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    text = scrape(client)
    assert samples(text)[GAUGE] == {}  # unknown, not 0
    assert types(text)[GAUGE] == "gauge"
    ran = threading.Event()
    with in_progress(get_redis(settings.REDIS_URL), "AnyCluster") as counted:
        ran.set()
    assert ran.is_set() and counted is False
