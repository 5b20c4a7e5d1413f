"""Deadlines on the join path: a join whose invocation is about to run out of time stops before the
next attempt and answers 503 in rpcStatus with gRPC's retry hint, never a gateway timeout; the
retry that follows is an ordinary join."""

from __future__ import annotations

import json

from tests.support import LambdaContext, http_event, join, load_function
from tests.support.table import all_items


def test_a_join_out_of_time_is_a_503_with_a_retry_hint_and_writes_nothing(
    make_token, machine_factory
) -> None:
    # Given a join whose invocation has 200 ms left (less than one more attempt needs)
    token = make_token()
    body = {"joinToken": token["token"], "csr": machine_factory().csr}
    before = all_items()
    # When it is handled
    result = load_function("machine_join").lambda_handler(
        http_event("/machines/join", json.dumps(body)), LambdaContext(remaining_millis=200)
    )
    # Then it answers UNAVAILABLE (14) with RetryInfo and Retry-After, and nothing was written
    answer = json.loads(result["body"])
    assert (result["statusCode"], answer["code"]) == (503, 14)
    assert answer["details"] == [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "OUT_OF_TIME",
            "domain": "joinplane",
            "metadata": {},
        },
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"},
    ]
    assert result["headers"]["retry-after"] == "1"
    assert all_items() == before
    # And the client's retry, with time to spare, is admitted
    assert join(body).status == 200
