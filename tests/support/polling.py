"""Waiting for something that happens on another thread or process (a worker's delivery, a
subprocess's request): the suite's one polling loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05) -> T:
    """Call `predicate` until it returns something truthy and return that; fail after `timeout` s.

    The predicate is asked once more at the deadline, so a slow machine fails only when the thing
    really did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout} s: {predicate}")
        time.sleep(interval)
