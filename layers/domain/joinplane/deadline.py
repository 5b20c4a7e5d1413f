"""The time this invocation has left, so that retry loops stop before Lambda does.

A function that runs past its `Timeout` is killed mid-request: API Gateway answers a bare 500 (the
client cannot tell a commit from a crash) and whatever the function was about to say is lost. So
each handler records its deadline first (`begin(context)`, from the Lambda context's
`get_remaining_time_in_millis()`), and every retry loop calls `check()` before an attempt: with
less than `reserve` seconds left it raises `OutOfTime`, which every dialect answers as 503 in its
own envelope with a retry hint. `sleep()` is the backoff that never sleeps past the deadline.
`attempts()` is the one retry loop built on both: every loop that tries again (a lost condition,
a throttled batch, reads that disagreed) is `for attempt in deadline.attempts(...)`.

The deadline lives in a `ContextVar`, not a global: the local runtime runs several invocations of
one function at once, each on its own thread, and each must see its own deadline. `end()` forgets
it, so a thread that served an invocation does not carry its deadline into later work.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from joinplane.errors import JoinplaneError, OutOfTime

# Seconds an attempt must have left to start: one more DynamoDB round trip and the answer.
DEFAULT_RESERVE = 1.0
# What a client is told to wait before retrying (Retry-After): a contended cluster settles in
# about the time of one join, and a retry that waits this long no longer meets the same crowd.
RETRY_AFTER_SECONDS = 1

_deadline: ContextVar[float | None] = ContextVar("joinplane_deadline", default=None)


def begin(context: Any) -> None:
    """Record this invocation's deadline (monotonic) from the Lambda context; without a context,
    or one without `get_remaining_time_in_millis`, there is none."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        _deadline.set(None)
        return
    try:
        millis = float(remaining())
    except (TypeError, ValueError):
        _deadline.set(None)
        return
    _deadline.set(time.monotonic() + max(0.0, millis) / 1000)


def end() -> None:
    """Forget the deadline (the invocation is over)."""
    _deadline.set(None)


def remaining() -> float:
    """Seconds left in this invocation (math.inf without a deadline)."""
    deadline = _deadline.get()
    if deadline is None:
        return math.inf
    return max(0.0, deadline - time.monotonic())


def check(reserve: float = DEFAULT_RESERVE) -> None:
    """Raise OutOfTime when less than `reserve` seconds remain."""
    if remaining() < reserve:
        raise OutOfTime(
            "out of time for this request; nothing more was attempted, retry",
            retry_after_seconds=RETRY_AFTER_SECONDS,
        )


def backoff(attempt: int, base: float, cap: float = 2.0) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0, min(cap, base * 2**attempt))


_jittered = backoff  # what `attempts` calls, since its parameter of the same name hides this


def sleep(seconds: float, reserve: float = DEFAULT_RESERVE) -> None:
    """Sleep `seconds`, but never into the last `reserve` seconds: raise OutOfTime instead when
    the pause would leave too little time for another attempt."""
    seconds = max(0.0, seconds)
    check(reserve + seconds)
    if seconds:
        time.sleep(seconds)


def attempts(
    tries: int, *, exhausted: JoinplaneError, backoff: tuple[float, float] | None = None
) -> Iterator[int]:
    """The one retry loop: `for attempt in attempts(3, exhausted=Aborted("..."))`, with `continue`
    to try again and `return` (or `break`) when done. Each attempt first checks the invocation has
    time left (an attempt that cannot finish answers 503 with Retry-After, not a gateway timeout).
    `backoff=(base, cap)` pauses before each attempt after the first, jittered (`backoff()`), and
    only when the pause leaves time for the attempt (`sleep()`). Running out of attempts raises
    `exhausted`: the caller says what that means (ABORTED for a lost race, safe to retry at once;
    UNAVAILABLE for a store or a cluster too busy to agree)."""
    for attempt in range(tries):
        if attempt and backoff is not None:
            sleep(_jittered(attempt, *backoff))
        else:
            check()
        yield attempt
    raise exhausted
