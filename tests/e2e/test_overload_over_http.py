"""A crowd of machines joining at once over HTTP, past the join function's concurrency limit:
every one hears an answer in the join dialect or API Gateway's throttle (never a reset, never a
500), and with the CLI's retries the token admits exactly its `maxUses`. `make bench` sends the
full crowd (200 machines at a `maxUses: 50` token); this one is smaller and throttled harder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from joinplane_cli import api
from tests.support.overload import csrs, join_together, new_token
from tests.support.runtime import Http

JOIN_FUNCTION = "MachineJoinFunction"
MACHINES = 40
MAX_USES = 10
LIMIT = 3  # invocations of the join function at once: far below the crowd


@pytest.fixture
def throttled(http: Http) -> Iterator[Http]:
    http.runtime.functions.put_concurrency(JOIN_FUNCTION, LIMIT)
    yield http
    http.runtime.functions.put_concurrency(JOIN_FUNCTION, None)


def _token(http: Http) -> str:
    assert http.runtime.dev and http.runtime.dev.pool
    return new_token(http.runtime.url, http.admin, http.runtime.dev.pool, MAX_USES)


def test_a_crowd_past_the_concurrency_limit_hears_answers_not_resets(throttled: Http) -> None:
    # Given a token for fewer machines than join at once, and a join function that takes 3 at a time
    token = _token(throttled)

    # When 40 machines join at the same moment, each sending one request
    burst = join_together(throttled.runtime.url, token, csrs(MACHINES), retry=None)

    # Then each got an HTTP answer, none a 500: admitted, told the token is used up, throttled
    # (429), or, if the machine is slow enough, told to retry a lost race (409) or later (503)
    assert burst.dropped == [], burst.summary()
    assert set(burst.statuses) <= {200, 401, 409, 429, 503}, burst.summary()
    assert burst.count(429) > 0, burst.summary()
    assert 0 < burst.count(200) <= MAX_USES, burst.summary()
    assert set(burst.reasons) <= {"", "JOIN_TOKEN_INVALID", "CONCURRENT_CHANGE", "UNAVAILABLE", "OUT_OF_TIME"}


def test_with_the_clis_retries_exactly_max_uses_machines_are_admitted(throttled: Http) -> None:
    # Given the same crowd and a fresh token
    token = _token(throttled)

    # When each machine joins through the CLI's HTTP client, which retries a throttle
    burst = join_together(throttled.runtime.url, token, csrs(MACHINES), retry=api.Retry())

    # Then the token admitted exactly its uses, and every other machine was told it is used up
    assert burst.dropped == [], burst.summary()
    assert burst.count(200) == MAX_USES, burst.summary()
    assert burst.count(401) == MACHINES - MAX_USES, burst.summary()
    assert set(burst.reasons) == {"", "JOIN_TOKEN_INVALID"}, burst.summary()
