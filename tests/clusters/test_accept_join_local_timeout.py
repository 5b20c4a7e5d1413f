"""The local runtime hands each function a context that counts down from the function's Timeout,
and accept-join answers from within it: a join that cannot finish in time is Sylve's 503 with a
retry hint, never the runtime's timeout (which the gateway turns into a bare 500)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest

from joinplane import deadline
from joinplane.dal import dynamo
from joinplane_local.functions import Functions, LambdaContext
from joinplane_local.template import Names, Template, load
from tests.support import http_event
from tests.support.clusters import join_body, make_cluster
from tests.support.table import all_items

TIMEOUT = 2.0


def test_the_context_counts_down_from_the_template_timeout() -> None:
    functions = Functions(Template(load(), Names()), environment={})
    spec = functions.spec("ClusterJoinFunction")
    assert spec.timeout_s == 10.0  # Globals.Function.Timeout in template.yaml
    context = LambdaContext(spec, "stream")
    assert 9_900 < context.get_remaining_time_in_millis() <= 10_000
    deadline.begin(context)
    try:
        assert 9.9 < deadline.remaining() <= 10.0
    finally:
        deadline.end()


def test_a_join_that_cannot_finish_in_time_is_503_not_a_timeout(
    admin_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the local runtime's ClusterJoinFunction with a 2 s Timeout
    functions = Functions(Template(load(), Names()), environment={})
    spec = functions.spec("ClusterJoinFunction")
    functions.specs["ClusterJoinFunction"] = dataclasses.replace(spec, timeout_s=TIMEOUT)
    key = make_cluster(admin_key)
    before = all_items()

    # And a store on which each commit takes 0.5 s and then loses to another join
    def slow_and_lost(writes: Any, **_: Any) -> None:
        time.sleep(0.5)
        raise dynamo.TransactionCanceled(["None", "TransactionConflict"])

    monkeypatch.setattr(dynamo, "transact", slow_and_lost)
    event = http_event(
        "/cluster/accept-join",
        json.dumps(join_body("node-a", "10.0.0.1", [1, 2])).encode(),
        {"x-cluster-key": key},
    )
    # When the node joins
    started = time.monotonic()
    result = functions.invoke("ClusterJoinFunction", event)
    # Then the function answered in time (the runtime did not report Sandbox.Timedout) ...
    assert time.monotonic() - started < TIMEOUT
    # ... with Sylve's 503 and a retry hint, and wrote nothing
    assert result["statusCode"] == 503
    assert result["headers"]["retry-after"] == "1"
    assert json.loads(result["body"])["message"] == "guest_identity_inventory_unavailable"
    assert all_items() == before
