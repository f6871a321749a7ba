"""Retry with exponential backoff and jitter, bounded by attempts and by the deadline.

Two layers use a RetryPolicy. gRPC itself re-sends the idempotent calls (Score, Search,
Embed, ...; envad.client.channels turns the policy into the channel's retry policy), to
the next replica when there are several. `call_with_retry`, the loop below, is kept only
for the writes (Ingest, Fit, SetLabel, ActivateModel, ResetCameraStats), for what gRPC's
policy cannot do there:

* writes go to one writer, with no replica to fail over to, so they must outwait its
  restart; gRPC caps its attempts at 5, this loop makes as many as the policy says;
* Ingest is a client stream: gRPC re-sends only what fits in its retry buffer, this loop
  builds the stream again from the items, whatever their size.

Only transient status codes are retried (UNAVAILABLE: server starting, restarting or
unreachable; RESOURCE_EXHAUSTED: queue full). The writes are safe to repeat: Ingest is
idempotent by id, Fit, SetLabel, ActivateModel and ResetCameraStats converge to the same
state. `backoff_delays` also paces a backfill's retries of whole batches
(envad.client.backfill).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from envad.errors import EnvadError

T = TypeVar("T")

RETRYABLE_CODES = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED"})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a call is repeated.

    Parameters
    ----------
    max_attempts : total tries including the first (1 disables retries); gRPC's
        retries of the idempotent calls stop at 5.
    initial_backoff, max_backoff : seconds before the 2nd try, and the cap on the wait
        before jitter.
    multiplier : growth of the wait from one try to the next.
    jitter : each wait of this loop is scaled by a random factor in [1 - jitter,
        1 + jitter], so many clients that failed together do not come back together
        (gRPC's own retries use 0.2).
    retry_codes : status code names worth another try.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.2
    max_backoff: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2
    retry_codes: frozenset[str] = RETRYABLE_CODES

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ValueError("backoffs must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")


NO_RETRY = RetryPolicy(max_attempts=1)


def backoff_delays(policy: RetryPolicy, rng: random.Random | None = None) -> Iterator[float]:
    """The waits between consecutive tries: max_attempts - 1 values, jittered, capped."""
    rng = rng or random.Random()
    base = policy.initial_backoff
    for _ in range(policy.max_attempts - 1):
        yield base * (1.0 + rng.uniform(-policy.jitter, policy.jitter))
        base = min(policy.max_backoff, base * policy.multiplier)


def call_with_retry(
    fn: Callable[[float | None], T],
    policy: RetryPolicy,
    deadline: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[EnvadError, int, float], None] | None = None,
) -> T:
    """Call `fn(remaining_seconds)` until it returns or fails with a non-transient error.

    `fn` raises EnvadError (already translated); `deadline` is a time.monotonic() value
    after which no new try starts (each try gets only the time left). `on_retry(error,
    attempt, delay)` is told before each wait.
    """
    delays = backoff_delays(policy)
    attempt = 1
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        try:
            return fn(remaining)
        except EnvadError as error:
            if error.code not in policy.retry_codes:
                raise
            delay = next(delays, None)
            if delay is None:
                raise
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise
            if on_retry is not None:
                on_retry(error, attempt, delay)
            sleep(delay)
            attempt += 1
