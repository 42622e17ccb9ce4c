"""Fault injection (`tables.faults`): a point trips once per file, only when the setting is on.

`exit_if` is checked in a child process (it ends the process it runs in)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from tables import faults
from tests import envdefaults

POINT = "server.any.consumer_fails"


def test_off_never_trips_and_never_raises(settings, tmp_path):
    settings.FAULT_INJECTION_DIR = ""
    (tmp_path / POINT).write_text("")
    assert not faults.trip(POINT)
    assert not faults.trip("../../etc/passwd")  # not even looked at while off
    faults.exit_if(POINT)  # returns: nothing trips
    assert (tmp_path / POINT).exists()


def test_a_file_trips_its_point_once(settings, tmp_path):
    settings.FAULT_INJECTION_DIR = str(tmp_path)
    assert not faults.trip(POINT)  # not armed
    (tmp_path / POINT).write_text("")
    (tmp_path / "server.other.consumer_fails").write_text("")
    assert faults.trip(POINT)
    assert not (tmp_path / POINT).exists()
    assert not faults.trip(POINT)  # the file is consumed
    assert (tmp_path / "server.other.consumer_fails").exists()  # other points untouched
    (tmp_path / POINT).write_text("")
    assert faults.trip(POINT)  # armed again


def test_a_missing_directory_or_a_directory_named_like_the_point_is_not_armed(settings, tmp_path):
    settings.FAULT_INJECTION_DIR = str(tmp_path / "absent")
    assert not faults.trip(POINT)
    settings.FAULT_INJECTION_DIR = str(tmp_path)
    (tmp_path / POINT).mkdir()
    assert not faults.trip(POINT)


@pytest.mark.parametrize("bad", ["", "a/b", "..", "."])
def test_a_point_name_that_is_not_a_file_name_is_refused_when_on(settings, tmp_path, bad):
    settings.FAULT_INJECTION_DIR = str(tmp_path)
    with pytest.raises(ValueError, match="not a fault-injection point name"):
        faults.trip(bad)


def test_one_file_trips_exactly_one_of_many_threads(settings, tmp_path):
    settings.FAULT_INJECTION_DIR = str(tmp_path)
    (tmp_path / POINT).write_text("")
    start = threading.Barrier(16)
    results: list[bool] = []
    lock = threading.Lock()

    def race() -> None:
        start.wait(timeout=30)
        tripped = faults.trip(POINT)
        with lock:
            results.append(tripped)

    threads = [threading.Thread(target=race) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False] * 15 + [True]


def _child(tmp_path, point: str) -> subprocess.CompletedProcess:
    code = (
        "import django; django.setup()\n"
        "from tables import faults\n"
        f"faults.exit_if({point!r})\n"
        "print('still running')\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "FAULT_INJECTION_DIR": str(tmp_path),
        "DEBUG": "true",
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=envdefaults.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_exit_if_ends_the_process_with_status_86_once(tmp_path):
    point = "controller.commit.after_step1"
    (tmp_path / point).write_text("")
    died = _child(tmp_path, point)
    assert died.returncode == faults.EXIT_CODE == 86, died.stderr
    assert "still running" not in died.stdout
    assert f"fault injection: exiting at {point}" in died.stderr
    assert not (tmp_path / point).exists()

    lived = _child(tmp_path, point)  # the file is gone: the point does not trip again
    assert lived.returncode == 0, lived.stderr
    assert "still running" in lived.stdout
