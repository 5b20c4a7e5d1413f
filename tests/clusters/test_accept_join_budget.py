"""What an accept-join costs in DynamoDB calls, counted on the real client: the key and the pool
(GetItem each), the members read before and after the guest items (Query each) so the two agree,
the guest items (one Query: a cluster's guest items are one partition's), and one TransactWriteItems
for a commit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from joinplane import aws
from tests.support.clusters import join_body, post


@pytest.fixture
def calls(admin_key: str) -> Iterator[Counter[str]]:
    counted: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        counted[event_name.rsplit(".", 1)[-1]] += 1

    aws.client("dynamodb").meta.events.register("before-call.dynamodb.*", count, unique_id="cluster-budget")
    yield counted
    aws.client("dynamodb").meta.events.unregister("before-call.dynamodb.*", unique_id="cluster-budget")


def test_an_accepted_join_reads_six_times_and_commits_once(key: str, calls: Counter[str]) -> None:
    # Given a cluster key, When a node with guests joins
    calls.clear()
    assert post(join_body("node-a", "10.0.0.1", [1, 2, 300]), key).status == 200
    # Then it cost the key, the pool, two member reads, one guest read and one transaction
    assert calls == Counter({"GetItem": 2, "Query": 3, "TransactWriteItems": 1})


def test_a_preflight_and_a_repeated_join_write_nothing(key: str, calls: Counter[str]) -> None:
    assert post(join_body("node-a", "10.0.0.1", [1]), key).status == 200
    calls.clear()
    # When the member joins again, or a newcomer asks for a preflight
    assert post(join_body("node-a", "10.0.0.1", [1]), key).status == 200
    assert post(join_body("node-b", "10.0.0.2", [2], preflight=True), key).status == 200
    # Then each was read only: no transaction
    assert calls == Counter({"GetItem": 4, "Query": 6})
