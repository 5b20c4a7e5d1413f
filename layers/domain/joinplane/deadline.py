"""The time this invocation has left, so that retry loops stop before Lambda does.

A function that runs past its `Timeout` is killed mid-request: API Gateway answers a bare 500 (the
client cannot tell a commit from a crash) and whatever the function was about to say is lost. So
each handler records its deadline first (`begin(context)`, from the Lambda context's
`get_remaining_time_in_millis()`), and every retry loop calls `check()` before an attempt: with
less than `reserve` seconds left it raises `OutOfTime`, which every dialect answers as 503 in its
own envelope with a retry hint. `sleep()` is the backoff that never sleeps past the deadline.

The deadline lives in a `ContextVar`, not a global: the local runtime runs several invocations of
one function at once, each on its own thread, and each must see its own deadline. `end()` forgets
it, so a thread that served an invocation does not carry its deadline into later work.
"""

from __future__ import annotations

import math
import random
import time
from contextvars import ContextVar
from typing import Any

from joinplane.errors import OutOfTime

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


def sleep(seconds: float, reserve: float = DEFAULT_RESERVE) -> None:
    """Sleep `seconds`, but never into the last `reserve` seconds: raise OutOfTime instead when
    the pause would leave too little time for another attempt."""
    seconds = max(0.0, seconds)
    check(reserve + seconds)
    if seconds:
        time.sleep(seconds)
