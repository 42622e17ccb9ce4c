"""`tables.server.hold_ahead`: the read is sent once, near the end; its answer serves the first
ask only, and only while fresh."""

from __future__ import annotations

from tables.domain.segment_states import EndCriteria
from tables.server.hold_ahead import AHEAD_MS, FRESH_S, HoldAhead


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _ahead(clock: Clock) -> tuple[HoldAhead, list[int]]:
    sent: list[int] = []

    def ask():
        sent.append(1)
        return lambda: "held"

    return HoldAhead(ask, clock), sent


END = EndCriteria.for_segment(1000, 60_000, 0)  # 50 rows (5 %) or 1 s before the end is near


def test_sent_once_near_the_end_and_used_once():
    clock = Clock()
    ahead, sent = _ahead(clock)
    ahead.maybe_ask(END, 949, 0)
    assert sent == []
    ahead.maybe_ask(END, 950, 0)
    ahead.maybe_ask(END, 999, 0)
    assert sent == [1]
    answer = ahead.take()
    assert answer is not None and answer() == "held"
    assert ahead.take() is None
    ahead.maybe_ask(END, 999, 0)  # after the first ask nothing is sent again
    assert sent == [1]


def test_near_the_time_limit_too():
    ahead, sent = _ahead(Clock())
    ahead.maybe_ask(END, 0, 60_000 - AHEAD_MS - 1)
    assert sent == []
    ahead.maybe_ask(END, 0, 60_000 - AHEAD_MS)
    assert sent == [1]


def test_an_old_answer_is_not_used():
    clock = Clock()
    ahead, _sent = _ahead(clock)
    ahead.maybe_ask(END, 999, 0)
    clock.now += FRESH_S + 0.1
    assert ahead.take() is None


def test_a_first_ask_far_from_the_end_reads_itself():
    ahead, sent = _ahead(Clock())
    ahead.maybe_ask(END, 10, 0)
    assert ahead.take() is None and sent == []
