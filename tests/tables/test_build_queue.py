"""The pending-build registry on a real Redis: registrations, claims, limits, take-over."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tables.build_batches import EXPECT_TTL_S, BatchLimits, BuildQueue, PendingBuild

pytestmark = pytest.mark.redis


@pytest.fixture
def queue(redis_client):
    cluster = f"test-{uuid.uuid4().hex[:8]}"
    built = BuildQueue(redis_client, cluster)
    yield built
    keys = list(redis_client.scan_iter(match=f"pinot:builds:{cluster}:*"))
    if keys:
        redis_client.delete(*keys)


def _build(task: str, rows: int = 100) -> PendingBuild:
    return PendingBuild(task, "t", f"t__0__{task}__20210721T0600Z", f"_staging/{task}", 1, 1 + rows)


def test_pending_requests_come_oldest_first_and_survive_the_round_trip(queue):
    for i, task in enumerate(["b", "a", "c"]):
        queue.register(_build(task), now_ms=1000 + i)
    pending = queue.pending()
    assert [(b.task_id, ms) for b, ms in pending] == [("b", 1000), ("a", 1001), ("c", 1002)]
    assert pending[0][0] == PendingBuild(**{**_build("b").__dict__, "registered_ms": 1000})
    assert PendingBuild.from_task("x", ["t", "s", "k", 5, 9], {"output_key": "o"}).output_key == "o"


def test_a_request_is_claimed_once_and_its_owner_can_take_it_back(queue):
    queue.register(_build("a"))
    assert queue.claim("a", "leader-1")
    assert not queue.claim("a", "leader-2")
    assert queue.claimant("a") == "leader-1"
    assert queue.claim("a", "leader-1")  # its own claim, from a run that died: taken over
    queue.release(["a"], "leader-2")  # not leader-2's to release
    assert queue.claimant("a") == "leader-1"
    queue.release(["a"], "leader-1")
    assert queue.claimant("a") is None and [b.task_id for b, _ in queue.pending()] == ["a"]


def test_waiting_for_a_claim_another_batch_holds_ends_at_its_deadline(queue):
    queue.register(_build("a"))
    assert queue.claim("a", "leader-1")
    with pytest.raises(TimeoutError, match="leader-1"):
        queue.wait_for_claim(_build("a"), lambda task: None, poll_s=0.01, timeout_s=0.05)
    assert queue.wait_for_claim(_build("a"), lambda task: "built", poll_s=0.01) == "built"


def test_claim_pending_respects_the_limits_and_other_claims(queue):
    for task, rows in [("a", 100), ("b", 900), ("c", 50), ("d", 10), ("e", 10)]:
        queue.register(_build(task, rows))
    assert queue.claim("d", "someone-else")
    taken = queue.claim_pending("leader", exclude={"a"}, max_builds=2, max_rows=100)
    # b alone is over the row budget, but the first request is always taken; then nothing fits.
    assert [b.task_id for b in taken] == ["b"]
    taken = queue.claim_pending("leader2", exclude=set(), max_builds=10, max_rows=1_000)
    assert [b.task_id for b in taken] == ["a", "c", "e"]  # b is leader's, d someone else's
    queue.finish(["a", "b", "c"])
    assert [b.task_id for b, _ in queue.pending()] == ["d", "e"]
    assert queue.claimant("a") is None and queue.claimant("d") == "someone-else"


def test_expired_registrations_are_dropped(queue, redis_client):
    queue.register(_build("a"))
    queue.register(_build("b"))
    redis_client.delete(f"{queue.prefix}request:a")  # as if its registration had expired
    assert [b.task_id for b, _ in queue.pending()] == ["b"]
    assert redis_client.zcard(f"{queue.prefix}pending") == 1


def test_renew_keeps_only_the_owners_claims_alive(queue, redis_client):
    queue.claim("a", "leader")
    queue.claim("b", "other")
    redis_client.pexpire(f"{queue.prefix}claim:a", 500)
    redis_client.pexpire(f"{queue.prefix}claim:b", 500)
    queue.renew(["a", "b"], "leader")
    assert redis_client.pttl(f"{queue.prefix}claim:a") > 1000
    assert redis_client.pttl(f"{queue.prefix}claim:b") <= 500


def _llc(task: str, sequence: int) -> PendingBuild:
    return PendingBuild(task, "t", f"t__0__{sequence}__20210721T0600Z", f"_staging/{task}", 1, 101)


def _announced(queue: BuildQueue) -> set[str]:
    key = queue._expect_key_of(_llc("x", 0).segment)
    return {m.decode() for m in queue.client.zrange(key, 0, -1)}


_ANNOUNCED = {"announced_wait_max_s": 60.0, "announced_stall_s": 60.0}


@pytest.mark.parametrize("settle_s", [0.0, 60.0], ids=["no-settle-wait", "a-minute"])
def test_a_batch_waits_for_the_builds_a_force_commit_announced(queue, settle_s):
    """With a settle wait of a minute too: once the last announced build came the batch does not
    wait for the burst to settle (it would outlive the join's deadline)."""
    limits = BatchLimits(16, 10_000, settle_s=settle_s, wait_max_s=settle_s, **_ANNOUNCED)
    first, second = _llc("a", 1), _llc("b", 2)
    queue.expect([first.segment, second.segment, "not-an-llc-name"])
    queue.register(first)
    assert _announced(queue) == {second.segment}  # a registration withdraws its announcement
    assert queue.claim("a", "a")
    batches: list[list[PendingBuild]] = []
    gathering = threading.Thread(
        target=lambda: batches.append(
            queue.gather(first, limits, lambda tasks: set(), lambda key: True)
        )
    )
    gathering.start()
    gathering.join(timeout=0.3)
    assert gathering.is_alive()  # its announced sibling is not registered yet
    queue.register(second)
    gathering.join(timeout=20)
    assert not gathering.is_alive()
    assert [b.task_id for b in batches[0]] == ["a", "b"]
    assert _announced(queue) == set()


def test_announced_builds_are_waited_for_while_they_keep_coming(queue):
    """Registrations 0.15 s apart, 0.6 s in all: past wait_max_s, never a stall."""
    limits = BatchLimits(16, 10_000, 0.0, 0.1, announced_wait_max_s=60.0, announced_stall_s=0.5)
    builds = [_llc(task, n) for n, task in enumerate("abcde", start=1)]
    queue.expect([b.segment for b in builds])
    queue.register(builds[0])
    assert queue.claim("a", "a")
    batches: list[list[PendingBuild]] = []
    gathering = threading.Thread(
        target=lambda: batches.append(
            queue.gather(builds[0], limits, lambda tasks: set(), lambda key: True)
        )
    )
    gathering.start()
    for build in builds[1:]:
        gathering.join(timeout=0.15)
        assert gathering.is_alive()
        queue.register(build)
    gathering.join(timeout=30)
    assert [b.task_id for b in batches[0]] == list("abcde")


def test_a_helper_waits_for_the_announced_builds_of_what_is_pending(queue):
    """A task whose own build is done helps with what is pending (`tables.builds._help`): with
    builds of a pause announced and only some registered, it waits for the rest as a leader
    does, so that they make one batch, not two. Nothing pending: no wait at all."""
    limits = BatchLimits(16, 10_000, 0.0, 0.0, **_ANNOUNCED)
    assert queue.settle(limits) is None  # nothing pending
    first, second = _llc("a", 1), _llc("b", 2)
    queue.expect([first.segment, second.segment])
    queue.register(first)
    settled = threading.Event()
    helping = threading.Thread(target=lambda: (queue.settle(limits), settled.set()))
    helping.start()
    helping.join(timeout=0.3)
    assert not settled.is_set()  # b is announced and not registered yet
    queue.register(second)
    helping.join(timeout=20)
    assert settled.is_set()
    found = queue.claim_others("helper", [], limits, lambda tasks: set(), lambda key: True)
    assert [b.task_id for b in found] == ["a", "b"]


def test_an_announced_build_that_never_comes_is_waited_for_until_the_stall_then_lapses(queue):
    limits = BatchLimits(16, 10_000, 0.0, 0.0, announced_wait_max_s=60.0, announced_stall_s=0.2)
    queue.expect([_llc("gone", 9).segment])
    queue.register(_llc("a", 1))
    assert queue.claim("a", "a")
    batch = queue.gather(_llc("a", 1), limits, lambda tasks: set(), lambda key: True)
    assert [b.task_id for b in batch] == ["a"]
    assert queue.client.ttl(queue._expect_key_of(_llc("x", 0).segment)) <= EXPECT_TTL_S
    # An announcement made EXPECT_TTL_S ago has lapsed: nobody waits for it any more.
    queue.expect([_llc("late", 8).segment], now_ms=int(time.time() * 1000) - EXPECT_TTL_S * 1000)
    assert queue._awaited([_llc("a", 1)]) == {_llc("gone", 9).segment}


def test_requests_read_before_are_not_read_again_and_expired_ones_still_drop(queue):
    for task in "abc":
        queue.register(_build(task))
    known: dict[str, PendingBuild] = {}
    assert [b.task_id for b, _ in queue.pending(known=known)] == list("abc")
    assert set(known) == set("abc")
    queue.client.delete(queue._request_key("b"))  # b's request expired after it was read
    queue.register(_build("d"))
    reads: list[list[str]] = []
    mget = queue.client.mget
    queue.client.mget = lambda keys: reads.append(list(keys)) or mget(keys)
    try:
        assert [b.task_id for b, _ in queue.pending(known=known)] == list("abcd")
        assert reads == [[queue._request_key("d")]]  # only the new one was read
        assert [b.task_id for b, _ in queue.pending()] == list("acd")  # read afresh: b dropped
    finally:
        del queue.client.mget


def test_claiming_others_asks_once_which_are_recorded_already(queue):
    for task in "abc":
        queue.register(_build(task))
    asked: list[list[str]] = []

    def recorded(tasks: list[str]) -> set[str]:
        asked.append(sorted(tasks))
        return {"b"}

    limits = BatchLimits(16, 10_000, 0.0, 0.0, 0.0, 0.0)
    found = queue.claim_others("x", [], limits, recorded, lambda key: True)
    assert [b.task_id for b in found] == ["a", "c"]
    assert asked == [["a", "b", "c"]]
    assert [b.task_id for b, _ in queue.pending()] == ["a", "c"]  # b finished: built already
