"""joinplane.deadline: the time an invocation has left, per invocation (a ContextVar), and
OutOfTime when too little is left; the operator dialect answers it as 503 with a retry hint."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from joinplane import deadline, operator_api
from joinplane.errors import OutOfTime, Unavailable
from joinplane.http import HttpRequest
from tests.support import http_event


@dataclass
class Context:
    """A Lambda context with `millis` left, as the runtime reports it."""

    millis: int

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


@pytest.fixture(autouse=True)
def no_deadline_left_behind() -> Iterator[None]:
    yield
    deadline.end()


def test_without_a_context_there_is_no_deadline() -> None:
    deadline.begin(None)
    assert deadline.remaining() == math.inf
    deadline.check(reserve=10_000)  # never out of time


def test_a_context_without_the_method_gives_no_deadline() -> None:
    deadline.begin(object())
    assert deadline.remaining() == math.inf


def test_the_deadline_comes_from_the_context_and_check_keeps_a_reserve() -> None:
    # Given an invocation with 5 s left
    deadline.begin(Context(5_000))
    # Then about 5 s remain, and an attempt needing 1 s may start
    assert 4.5 < deadline.remaining() <= 5.0
    deadline.check(1.0)
    # But one needing 6 s may not: OutOfTime, an Unavailable with a retry hint
    with pytest.raises(OutOfTime) as raised:
        deadline.check(6.0)
    assert isinstance(raised.value, Unavailable)
    assert raised.value.code == "UNAVAILABLE"
    assert raised.value.retry_after_seconds == deadline.RETRY_AFTER_SECONDS == 1


def test_a_spent_invocation_is_out_of_time_at_once() -> None:
    deadline.begin(Context(0))
    assert deadline.remaining() == 0.0
    with pytest.raises(OutOfTime):
        deadline.check(0.001)


def test_end_forgets_the_deadline() -> None:
    deadline.begin(Context(10))
    deadline.end()
    assert deadline.remaining() == math.inf


def test_a_pause_that_would_reach_into_the_reserve_is_not_taken() -> None:
    # Given 1.2 s left
    deadline.begin(Context(1_200))
    started = time.monotonic()
    # When a backoff of 0.5 s is asked for with 1 s to keep in reserve
    with pytest.raises(OutOfTime):
        deadline.sleep(0.5, reserve=1.0)
    # Then it raised at once instead of sleeping first
    assert time.monotonic() - started < 0.1
    # And a pause that fits is taken
    deadline.sleep(0.05, reserve=1.0)
    assert time.monotonic() - started >= 0.05


def test_backoff_is_jittered_and_capped() -> None:
    pauses = [deadline.backoff(attempt, 0.1, cap=0.5) for attempt in range(1, 8) for _ in range(20)]
    assert all(0 <= pause <= 0.5 for pause in pauses)
    assert len(set(pauses)) > 100  # jittered, not a fixed schedule


def test_attempts_run_out_into_the_callers_error() -> None:
    # Given no deadline and a loop of three attempts that never succeeds
    busy = Unavailable("busy")
    tried: list[int] = []
    # When it runs out, Then the caller's own error is raised (its status is the caller's choice)
    with pytest.raises(Unavailable) as raised:
        for attempt in deadline.attempts(3, exhausted=busy):
            tried.append(attempt)
    assert raised.value is busy
    assert tried == [0, 1, 2]


def test_an_attempt_starts_only_with_time_left() -> None:
    # Given 0.5 s left, less than an attempt's reserve
    deadline.begin(Context(500))
    tried: list[int] = []
    # When a loop starts, Then no attempt is made: out of time, not out of attempts
    with pytest.raises(OutOfTime):
        for attempt in deadline.attempts(3, exhausted=Unavailable("busy")):
            tried.append(attempt)
    assert tried == []


def test_attempts_pause_between_attempts_within_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a backoff whose jitter came out at 0.05 s for every pause
    monkeypatch.setattr(deadline, "_jittered", lambda attempt, base, cap: 0.05)
    started = time.monotonic()
    # When three attempts run without a deadline, Then two pauses were taken
    with pytest.raises(Unavailable):
        for _ in deadline.attempts(3, exhausted=Unavailable("busy"), backoff=(0.05, 0.5)):
            pass
    assert time.monotonic() - started >= 0.1
    # And with 1.03 s left, the pause before the second attempt would reach into the reserve:
    # the first attempt ran, the second is out of time at once instead of after sleeping
    deadline.begin(Context(1_030))
    tried: list[int] = []
    started = time.monotonic()
    with pytest.raises(OutOfTime):
        for attempt in deadline.attempts(3, exhausted=Unavailable("busy"), backoff=(0.05, 0.5)):
            tried.append(attempt)
    assert tried == [0]
    assert time.monotonic() - started < 0.05


def test_concurrent_invocations_each_see_their_own_deadline() -> None:
    # Given two invocations on two threads at once, one with 100 s left and one with 1 s
    seen: dict[int, float] = {}
    both_began = threading.Barrier(2)

    def invocation(millis: int) -> None:
        deadline.begin(Context(millis))
        both_began.wait()
        seen[millis] = deadline.remaining()
        deadline.end()

    threads = [threading.Thread(target=invocation, args=(m,)) for m in (100_000, 1_000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then neither saw the other's deadline, and this thread has none
    assert 99 < seen[100_000] <= 100
    assert 0 < seen[1_000] <= 1
    assert deadline.remaining() == math.inf


def test_the_operator_envelope_answers_out_of_time_with_503_and_retry_after() -> None:
    # Given an operator route whose work needs more time than the invocation has left
    routes = operator_api.router("PoolsFunction")
    remaining_after: list[float] = []

    @routes.operation("pools.get")
    def slow(request: HttpRequest) -> dict[str, Any]:
        deadline.check(2.0)
        return {}

    # When it is invoked with 500 ms left
    result = routes.handle(http_event("/api/compute/pools/get", b"{}"), Context(500))
    remaining_after.append(deadline.remaining())
    # Then the answer is the operator envelope's UNAVAILABLE, 503, with a retry hint
    assert result["statusCode"] == 503
    assert result["headers"]["retry-after"] == "1"
    body = json.loads(result["body"])
    assert body["error"]["code"] == "UNAVAILABLE"
    assert body["error"]["details"] == [{"reason": "out_of_time", "retryAfterSeconds": 1}]
    # And the invocation's deadline does not outlive it on this thread
    assert remaining_after == [math.inf]


def test_a_plain_unavailable_carries_no_retry_after() -> None:
    # Given an operator route whose store is down (not out of time)
    routes = operator_api.router("PoolsFunction")

    @routes.operation("pools.get")
    def down(request: HttpRequest) -> dict[str, Any]:
        raise Unavailable("the store is unavailable, retry later")

    # When it is invoked with time to spare; Then 503 without a retry hint
    result = routes.handle(http_event("/api/compute/pools/get", b"{}"), Context(10_000))
    assert result["statusCode"] == 503
    assert "retry-after" not in result["headers"]
