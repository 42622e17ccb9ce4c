"""The batch's publisher thread (`tables.builds._publisher`): what it is given, in groups."""

from __future__ import annotations

import threading
from queue import SimpleQueue

from tables import builds


def test_the_first_segment_goes_alone_and_the_rest_in_groups_of_what_was_made_meanwhile():
    made: SimpleQueue = SimpleQueue()
    groups: list[list[int]] = []
    first_published = threading.Event()
    release = threading.Event()

    def publish(group):
        groups.append([index for index, _, _ in group])
        first_published.set()
        release.wait(10)  # a slow sync: the main thread makes more meanwhile

    thread = threading.Thread(target=builds._publisher, args=(made, publish))
    thread.start()
    made.put((0, None, "k0"))
    assert first_published.wait(10)
    for index in range(1, builds.PUBLISH_EVERY + 3):  # made while the first one syncs
        made.put((index, None, f"k{index}"))
    made.put(None)
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    every = builds.PUBLISH_EVERY
    assert groups == [[0], list(range(1, every + 1)), [every + 1, every + 2]]


def test_nothing_made_publishes_nothing():
    made: SimpleQueue = SimpleQueue()
    made.put(None)
    published = []
    builds._publisher(made, published.append)
    assert published == []
