"""Celery through the real broker and real worker processes (not eager mode)."""

from __future__ import annotations

import os

import pytest

from console.tasks import ping
from tables.tasks import spark_probe

pytestmark = [pytest.mark.celery, pytest.mark.redis]


def test_a_task_round_trips_through_a_worker_process(celery_workers):
    reply = ping.delay().get(timeout=10)
    assert reply["pid"] != os.getpid()
    assert reply["pid"] in celery_workers.child_pids("worker")


@pytest.mark.spark
def test_spark_tasks_run_in_the_spark_worker(celery_workers):
    reply = spark_probe.delay().get(timeout=120)
    assert reply["sum"] == sum(range(1000))
    assert reply["master"] == "local[1]"
    assert reply["pid"] in celery_workers.child_pids("spark")
