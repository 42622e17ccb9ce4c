import pytest

from tables.domain.backoff import Backoff, LogThrottle


def test_delays_double_up_to_the_cap_and_reset_starts_over():
    backoff = Backoff(first=0.5, cap=4.0)
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.failures == 6
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_a_long_outage_never_overflows():
    backoff = Backoff(first=1.0, cap=30.0)
    for _ in range(10_000):
        delay = backoff.next_delay()
    assert delay == 30.0


@pytest.mark.parametrize("args", [(0, 1), (2, 1), (1, 2, 0.5)])
def test_bad_parameters_are_refused(args):
    with pytest.raises(ValueError):
        Backoff(*args)


def test_throttle_writes_once_per_interval_and_counts_what_it_held_back():
    throttle = LogThrottle(every_s=60)
    assert throttle.allow("redis", now=0) == (True, 0)
    assert throttle.allow("redis", now=1) == (False, 0)
    assert throttle.allow("redis", now=59) == (False, 0)
    assert throttle.allow("zk", now=59) == (True, 0)  # keys are independent
    assert throttle.allow("redis", now=60) == (True, 2)
    assert throttle.allow("redis", now=61) == (False, 0)


def test_clear_lets_the_next_occurrence_through():
    throttle = LogThrottle(every_s=60)
    throttle.allow("redis", now=0)
    throttle.allow("redis", now=1)
    throttle.clear("redis")
    assert throttle.allow("redis", now=2) == (True, 0)
