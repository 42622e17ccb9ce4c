"""The committer's hand-off to the next segment's consumer (`tables.server.handoff`)."""

from __future__ import annotations

import threading

from tables.server.handoff import ConsumerStarts

T = "t_REALTIME"


def seg(partition: int, sequence: int) -> str:
    return f"t__{partition}__{sequence}__20261126T0900Z"


def test_a_later_segment_of_the_partition_releases_the_wait():
    starts = ConsumerStarts()
    starts.started(T, seg(0, 3))
    assert not starts.wait_after(T, seg(0, 3), 0.01)  # only itself so far
    assert starts.wait_after(T, seg(0, 2), 0.01)  # an earlier segment's wait is over already

    waiting = threading.Event()
    answer: list[bool] = []

    def committer() -> None:
        waiting.set()
        answer.append(starts.wait_after(T, seg(0, 3), 60))

    thread = threading.Thread(target=committer)
    thread.start()
    waiting.wait(10)
    starts.started(T, seg(1, 9))  # another partition does not count
    starts.started("other_REALTIME", seg(0, 4))  # nor another table
    starts.started(T, seg(0, 4))
    thread.join(60)
    assert answer == [True]


def test_no_next_start_means_false_after_the_timeout_and_odd_names_never_match():
    starts = ConsumerStarts()
    assert starts.wait_after(T, seg(0, 0), 0.01) is False
    starts.started(T, "not-an-llc-name")
    assert starts.wait_after(T, "not-an-llc-name", 0.01) is False
    starts.started(T, seg(0, 5))
    starts.started(T, seg(0, 1))  # an older start does not lower what was seen
    assert starts.wait_after(T, seg(0, 4), 0.01)


def test_after_the_start_it_waits_for_the_first_fetch_at_most_a_bound(monkeypatch):
    from tables.server import handoff

    starts = ConsumerStarts()
    fetched = threading.Event()
    starts.started(T, seg(0, 4), fetched)
    answer: list[bool] = []
    thread = threading.Thread(target=lambda: answer.append(starts.wait_after(T, seg(0, 3), 60)))
    monkeypatch.setattr(handoff, "FIRST_FETCH_WAIT_S", 60)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive()  # started, not fetched yet: still waiting
    fetched.set()
    thread.join(60)
    assert answer == [True]

    monkeypatch.setattr(handoff, "FIRST_FETCH_WAIT_S", 0.01)
    starts.started(T, seg(0, 6), threading.Event())  # a fetch that never returns...
    assert starts.wait_after(T, seg(0, 5), 60)  # ... holds the build back only that long
