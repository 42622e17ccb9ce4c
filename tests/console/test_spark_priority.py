"""A spark-queue worker yields the CPU (console.celery): its nice value, and its session's
autogroup when it leads the session. Each case runs in a child process: niceness never goes back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os, sys
from pathlib import Path
from types import SimpleNamespace
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
import django
django.setup()
from console.celery import _lower_spark_priority
queues = sys.argv[1].split(",")
worker = SimpleNamespace(app=SimpleNamespace(amqp=SimpleNamespace(queues=dict.fromkeys(queues))))
_lower_spark_priority(sender="probe", instance=worker)
group = Path("/proc/self/autogroup")
fields = group.read_text().split() if group.exists() else []
print(os.nice(0), fields[-1] if fields else "-")
"""

AUTOGROUP = Path("/proc/self/autogroup")


def _probe(queues: str, own_session: bool, niceness: str = "7") -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, queues],
        cwd=ROOT,
        env={**os.environ, "SPARK_WORKER_NICENESS": niceness},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        start_new_session=own_session,
    )
    nice, group = done.stdout.split()
    return int(nice), group


def _own_autogroup_nice() -> str:
    # The kernel prints nothing for a task in the default (boot) autogroup, as in CI's container.
    fields = AUTOGROUP.read_text().split() if AUTOGROUP.exists() else []
    return fields[-1] if fields else "-"


def test_a_spark_worker_leading_its_session_lowers_it_and_its_autogroup():
    base = os.nice(0)
    nice, group = _probe("spark", own_session=True)
    assert nice == base + 7
    # A new session gets its own autogroup, which the kernel does print.
    assert group == ("7" if AUTOGROUP.exists() else "-")


def test_one_sharing_a_session_leaves_the_session_alone():
    before = _own_autogroup_nice()
    nice, group = _probe("celery,spark", own_session=False)
    assert nice == os.nice(0) + 7
    assert group == before == _own_autogroup_nice()


@pytest.mark.parametrize(("queues", "niceness"), [("celery", "7"), ("spark", "0")])
def test_other_workers_and_niceness_zero_change_nothing(queues, niceness):
    nice, group = _probe(queues, own_session=True, niceness=niceness)
    assert nice == os.nice(0)
    assert group in ("0", "-")
