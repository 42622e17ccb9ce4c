"""`tables.zk.poll_handler`: kazoo's `selector_select` semantics in one `poll`; clients on it."""

from __future__ import annotations

import resource
import socket

import pytest
from kazoo.handlers.utils import selector_select

from tables.zk.poll_handler import PollThreadingHandler, poll_select
from tests.poll import wait_until


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("select", [poll_select, selector_select], ids=["poll", "kazoo"])
def test_the_same_answers_as_kazoos_select(select, pair):
    a, b = pair
    assert select([a], [], [], 0) == ([], [], [])  # nothing to read yet
    assert select([], [a], [], 0) == ([], [a], [])  # an empty send buffer: writable
    b.sendall(b"x")
    assert select([a, b], [], [], 1.0) == ([a], [], [])
    assert select([a], [a], [], 0) == ([a, a], [], [])  # read wins: all of its objects, as kazoo
    assert select([a.fileno()], [], [], 0) == ([a.fileno()], [], [])  # descriptors as well
    b.close()
    assert select([], [], [], 0) == ([], [], [])


def test_a_hang_up_reads_as_readable_and_a_wait_times_out(pair):
    a, b = pair
    assert poll_select([a], [], [], 0.05) == ([], [], [])  # timed out: nothing
    b.shutdown(socket.SHUT_WR)
    assert poll_select([a], [], [], 1.0) == ([a], [], [])


def test_bad_arguments_are_refused_as_kazoo_refuses_them(pair):
    a, _ = pair
    with pytest.raises(ValueError, match="non-negative"):
        poll_select([a], [], [], -1)
    with pytest.raises(TypeError, match="number"):
        poll_select([a], [], [], "1")
    with pytest.raises(TypeError, match="Invalid file"):
        poll_select([object()], [], [], 0)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    never_open = hard if hard != resource.RLIM_INFINITY else 2**30  # no descriptor is that high
    with pytest.raises(ValueError, match="Invalid"):
        poll_select([never_open], [], [], 0)


def test_the_clients_run_on_it(zk):
    assert isinstance(zk.handler, PollThreadingHandler)
    zk.create("/poll-handler-test", b"v")
    seen = []
    zk.DataWatch("/poll-handler-test", lambda data, stat: seen.append(data))
    zk.set("/poll-handler-test", b"w")
    wait_until(lambda: b"w" in seen, timeout=10, what="the watch saw the update")
    assert seen[:1] == [b"v"]
    assert zk.get("/poll-handler-test")[0] == b"w"
