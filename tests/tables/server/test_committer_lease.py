"""The committer stops waiting for a build once its lease ran out unrenewed (issue 13: every wait
has a deadline), and keeps waiting while renewals succeed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tables.domain.completion_response import Response, Status
from tables.server.committer import Committer


class NeverReady:
    """A build that never finishes."""

    def __init__(self) -> None:
        self.revoked = False
        self.polls = 0

    def ready(self) -> bool:
        self.polls += 1
        return False

    def successful(self) -> bool:
        return False

    def get(self, timeout=None, propagate=True):
        raise AssertionError("never finished")

    def revoke(self) -> None:
        self.revoked = True


class Controller:
    def __init__(self, answer: Status) -> None:
        self.answer = answer
        self.extends = 0

    def extend_build_time(self, table, segment, offset, extra) -> Response:
        self.extends += 1
        return Response(self.answer)


class Consumer:
    """What `_build` reads of a consumer; `wait` stands for the poll interval passing."""

    def __init__(self, clock: list[float], stop_after: int) -> None:
        self.spec = SimpleNamespace(
            table="t_REALTIME", segment="t__0__0__20240501T1030Z", partition=0, start_offset=1
        )
        self.next_offset = 10
        self.clock, self.stop_after, self.waits = clock, stop_after, 0

    def wait(self, seconds: float) -> bool:
        self.waits += 1
        self.clock[0] += seconds
        return self.waits >= self.stop_after  # True: stopped (the test's own deadline)


def _run(answer: Status, monkeypatch, stop_after: int = 1000):
    clock = [1000.0]
    monkeypatch.setattr("tables.server.committer.time.monotonic", lambda: clock[0])
    handle, controller = NeverReady(), Controller(answer)
    committer = Committer(controller, lambda: None, lambda *a: handle, Path("/nonexistent"), 1.0)
    consumer = Consumer(clock, stop_after)
    outcome = committer._build(consumer, Response(Status.COMMIT, build_time_sec=10), "s", "u")
    return outcome, handle, controller, consumer, clock[0] - 1000.0


def test_an_unrenewed_lease_ends_the_wait_soon_after_it_runs_out(monkeypatch):
    outcome, handle, controller, consumer, waited = _run(Status.NOT_SENT, monkeypatch)
    assert outcome is None and handle.revoked
    assert controller.extends >= 2  # asked again while the lease lasted
    assert 10 <= waited <= 12  # the 10 s lease, then one poll
    assert consumer.waits < 1000  # not stopped by the test's own limit


def test_a_renewed_lease_keeps_waiting_for_the_build(monkeypatch):
    outcome, handle, controller, consumer, waited = _run(Status.PROCESSED, monkeypatch, 100)
    assert outcome is None and handle.revoked  # ended only by the consumer stopping
    assert consumer.waits == 100 and waited == 100
    assert controller.extends > 10
