"""The race harness of every concurrency test: threads held at a barrier and released at once, each
running the code under test against the one shared (moto) server, as concurrent Lambdas share one
AWS. That the harness really produces overlapping read-then-write windows is checked once, in
tests/harness/test_race_harness.py (`pytest -m harness`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

JOIN_SECONDS = 120  # a thread still running after this is a hang, not a slow race


def release_together(
    work: Callable[[int], Any], threads: int, *, catch: type[BaseException] | None = None
) -> list[Any]:
    """work(0..threads-1), each on its own thread, all released at once; their results in order.

    With `catch`, such an exception becomes that thread's result; any other exception fails the
    caller (re-raised once every thread has finished), as does a thread that never finishes."""
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads
    failures: list[BaseException] = []

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        except BaseException as error:
            if catch is not None and isinstance(error, catch):
                results[index] = error
            else:
                failures.append(error)

    workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(JOIN_SECONDS)
    hung = [worker.name for worker in workers if worker.is_alive()]
    if hung:
        raise AssertionError(f"{len(hung)} of {threads} racing threads did not finish in {JOIN_SECONDS} s")
    if failures:
        raise failures[0]
    return results
