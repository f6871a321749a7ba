"""Backoff schedule and the retry loop (pure functions, no network)."""

from __future__ import annotations

import random

import pytest

from envad.client.retry import RetryPolicy, backoff_delays, call_with_retry
from envad.errors import InvalidInput, ResourceExhausted, Unavailable


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(max_attempts=6, initial_backoff=0.5, max_backoff=3.0, multiplier=2,
                         jitter=0)
    assert list(backoff_delays(policy)) == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_stays_within_bounds() -> None:
    policy = RetryPolicy(max_attempts=200, initial_backoff=1.0, max_backoff=1.0, jitter=0.25)
    delays = list(backoff_delays(policy, random.Random(0)))
    assert min(delays) >= 0.75 and max(delays) <= 1.25
    assert len(set(delays)) > 100


@pytest.mark.parametrize("error", [Unavailable, ResourceExhausted])
def test_transient_errors_are_retried(error) -> None:
    calls: list[float | None] = []
    sleeps: list[float] = []

    def fn(remaining):
        calls.append(remaining)
        if len(calls) < 3:
            raise error("try later")
        return "done"

    policy = RetryPolicy(max_attempts=5, initial_backoff=0.1, jitter=0)
    assert call_with_retry(fn, policy, sleep=sleeps.append) == "done"
    assert sleeps == [0.1, 0.2] and len(calls) == 3


def test_other_errors_and_exhaustion_raise() -> None:
    sleeps: list[float] = []
    with pytest.raises(InvalidInput):
        call_with_retry(lambda t: (_ for _ in ()).throw(InvalidInput("bad")), RetryPolicy(),
                        sleep=sleeps.append)
    assert sleeps == []
    with pytest.raises(Unavailable):
        call_with_retry(lambda t: (_ for _ in ()).throw(Unavailable("down")),
                        RetryPolicy(max_attempts=3, jitter=0), sleep=sleeps.append)
    assert len(sleeps) == 2


def test_no_wait_past_the_deadline() -> None:
    import time

    sleeps: list[float] = []
    with pytest.raises(Unavailable):
        call_with_retry(lambda t: (_ for _ in ()).throw(Unavailable("down")),
                        RetryPolicy(initial_backoff=10, jitter=0),
                        deadline=time.monotonic() + 1.0, sleep=sleeps.append)
    assert sleeps == []


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=1.5)
