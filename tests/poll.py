"""Polling with a deadline: the one way tests wait for something (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> T:
    """Call `condition` until it returns a truthy value, and return that value.

    Raises TimeoutError naming `what` when the deadline passes first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not true after {timeout:g} s: {what or condition!r}")
        time.sleep(interval)
