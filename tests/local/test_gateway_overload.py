"""Overload is answered, never dropped: a function at its concurrency limit is API Gateway's 429
with Retry-After, and a burst of connections is queued by the listener rather than reset."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator

import pytest

from joinplane_local.functions import DEFAULT_CONCURRENCY
from tests.support import release_together
from tests.support.runtime import Local

HELD_LIMIT = 2  # the fixture template's ReservedConcurrentExecutions for Held


@pytest.fixture
def held(fresh: Local) -> Iterator[Local]:
    module = fresh.module("Held")
    module.RELEASE.clear()
    yield fresh
    module.RELEASE.set()


def test_a_function_at_its_concurrency_limit_is_throttled_with_retry_after(held: Local) -> None:
    # Given as many invocations of Held in flight as the template reserves for it
    module = held.module("Held")
    replies: list = []
    in_flight = [
        threading.Thread(target=lambda: replies.append(held.call("POST", "/held"))) for _ in range(HELD_LIMIT)
    ]
    for thread in in_flight:
        thread.start()
    for _ in range(HELD_LIMIT):
        assert module.STARTED.acquire(timeout=5)

    # When one more request arrives
    throttled = held.call("POST", "/held")

    # Then it is API Gateway's throttle answer, with when to retry, and the function never ran it
    assert throttled.status == 429
    assert throttled.json() == {"message": "Too Many Requests"}
    assert throttled.header("retry-after") == "1"
    assert not module.STARTED.acquire(timeout=0.2)
    assert "POST /held 429" in held.log.text()

    # And once the held ones finish, the function takes requests again
    module.RELEASE.set()
    for thread in in_flight:
        thread.join(10)
    assert [r.status for r in replies] == [200, 200]
    assert held.call("POST", "/held").status == 200


def test_the_limit_is_the_templates_reservation_or_the_runtimes_default(fresh: Local) -> None:
    # Given the fixture runtime, started with the default limit, whose template reserves 2 for Held
    # When / Then Held has its reservation and every other function the default
    limits = fresh.runtime.functions.limits
    assert limits["Held"] == HELD_LIMIT
    assert {limit for name, limit in limits.items() if name != "Held"} == {DEFAULT_CONCURRENCY}


def test_a_burst_of_connections_each_gets_an_answer(fresh: Local) -> None:
    # Given 200 clients connecting at the same moment
    host, port = fresh.runtime.url.removeprefix("http://").split(":")

    def get(_: int) -> int:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request("GET", "/items/burst")
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    # When they all send a request; Then every one is answered (a reset would raise here), each
    # either served or throttled
    statuses = release_together(get, 200)
    assert set(statuses) <= {200, 429}
    assert statuses.count(200) > 0


@pytest.fixture
def gatekeeper_stopped(fresh: Local) -> Iterator[Local]:
    fresh.runtime.functions.put_concurrency("Gatekeeper", 0)  # every invocation throttled
    yield fresh
    fresh.runtime.functions.put_concurrency("Gatekeeper", None)


def test_a_throttled_authorizer_is_a_429_that_the_cache_does_not_keep(gatekeeper_stopped: Local) -> None:
    # Given an authorizer that Lambda will not run
    good = [("Authorization", "Bearer good")]

    # When a request with a good key arrives
    reply = gatekeeper_stopped.call("POST", "/private/echo", body="{}", headers=good)

    # Then it is throttled before anything ran, with when to retry
    assert (reply.status, reply.json(), reply.header("retry-after")) == (
        429,
        {"message": "Too Many Requests"},
        "1",
    )
    assert gatekeeper_stopped.module("Gatekeeper").CALLS == []

    # And once the authorizer runs again, the same key is authorized: no refusal was cached
    gatekeeper_stopped.runtime.functions.put_concurrency("Gatekeeper", None)
    assert gatekeeper_stopped.call("POST", "/private/echo", body="{}", headers=good).status == 200
