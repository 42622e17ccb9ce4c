"""`tables.zk.poll_handler`: kazoo's `selector_select` semantics in one `poll`; clients on it."""

from __future__ import annotations

import resource
import socket

import pytest
from kazoo.handlers.utils import selector_select

from tables.zk.poll_handler import READ_CHUNK, BufferedSocket, PollThreadingHandler, poll_select
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


def test_a_buffered_socket_answers_reads_from_one_receive(pair):
    a, b = pair
    buffered = BufferedSocket(a)
    b.sendall(b"\x00\x00\x00\x03abc" + b"\x00\x00\x00\x02de")  # two replies at once
    assert poll_select([buffered], [], [], 1.0) == ([buffered], [], [])
    assert buffered.recv(4) == b"\x00\x00\x00\x03"
    assert buffered.pending() == 9  # the rest came with the first receive
    # Readable without asking the kernel: even with no timeout this cannot block.
    assert poll_select([buffered, b], [b], [], None) == ([buffered], [], [])
    # The next time the others are looked at too (without waiting): b is writable, and a byte
    # for it to read shows up beside the buffered socket; then the buffer alone again.
    assert poll_select([buffered, b], [b], [], None) == ([buffered], [b, b], [])  # as kazoo
    a.sendall(b"!")
    assert poll_select([buffered, b], [], [], None) == ([buffered], [], [])
    assert poll_select([buffered, b], [], [], None) == ([b, buffered], [], [])
    assert b.recv(1) == b"!"
    assert [buffered.recv(3), buffered.recv(4), buffered.recv(10)] == [
        b"abc",
        b"\x00" * 3 + b"\x02",
        b"de",
    ]
    assert buffered.pending() == 0
    assert poll_select([buffered], [], [], 0.05) == ([], [], [])  # drained: the kernel again
    b.sendall(b"fg")
    assert poll_select([buffered], [], [], 1.0) == ([buffered], [], [])
    assert buffered.recv(1) == b"f"
    assert buffered.recv(1) == b"g"
    assert buffered.fileno() == a.fileno()
    buffered.setblocking(False)  # anything else is the socket's
    assert a.gettimeout() == 0.0


def test_a_reply_larger_than_one_receive_is_read_in_pieces(pair):
    a, b = pair
    buffered = BufferedSocket(a)
    a.setblocking(False)
    size = READ_CHUNK * 3 + 5
    sent = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    sender = __import__("threading").Thread(target=b.sendall, args=(sent,))
    sender.start()
    got = bytearray()
    while len(got) < size:
        if not buffered.pending():
            poll_select([buffered], [], [], 5.0)
        got += buffered.recv(size - len(got))
    sender.join()
    assert bytes(got) == sent


def test_the_clients_run_on_it(zk):
    assert isinstance(zk.handler, PollThreadingHandler)
    zk.create("/poll-handler-test", b"v")
    seen = []
    zk.DataWatch("/poll-handler-test", lambda data, stat: seen.append(data))
    zk.set("/poll-handler-test", b"w")
    wait_until(lambda: b"w" in seen, timeout=10, what="the watch saw the update")
    assert seen[:1] == [b"v"]
    assert zk.get("/poll-handler-test")[0] == b"w"


def test_a_burst_of_replies_comes_back_whole_and_in_order(zk):
    """Hundreds of calls in flight at once: their replies arrive together and are read out of
    the buffered socket (`kazoo` matches each to its call in order)."""
    assert isinstance(zk._connection._socket, BufferedSocket)
    zk.create("/poll-burst", b"")
    payloads = {f"/poll-burst/n{i}": (f"{i}:".encode() * (1 + i % 97)) for i in range(300)}
    for result in [zk.create_async(path, data) for path, data in payloads.items()]:
        result.get(timeout=30)
    calls = {path: zk.get_async(path) for path in payloads}
    assert {path: call.get(timeout=30)[0] for path, call in calls.items()} == payloads
