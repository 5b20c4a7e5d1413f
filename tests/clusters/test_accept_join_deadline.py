"""Concurrent accept-joins against the moto server within the invocation's time.

8 nodes joining one cluster at once, every one of them claiming guest IDs in the same guest items,
serialise: of the joins that read an item together one commits, the others decide again. On a
slow store that takes longer than the invocation has: each answer must still come before the
deadline, as success or as Sylve's 503 with a retry hint, never as a timeout after a commit; and
a node that retries after whatever answer it got ends up a member.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from joinplane.dal import dynamo
from tests.support import release_together
from tests.support.clusters import (
    Answer,
    Remaining,
    cluster_nodes,
    join_body,
    post,
    registry,
)

N = 8
GUESTS = 40  # each node's guests interleaved with the others': every join touches items 0 and 1
DEADLINE = 2.0  # seconds each invocation has
MARGIN = 0.25  # an answer may come this much after the deadline at most (it should come before)
STORE_LATENCY = 0.3  # a slow commit: the 8 joins cannot all commit within one invocation


@pytest.fixture
def slow_commits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every TransactWriteItems takes STORE_LATENCY longer (outside the emulator's lock, so
    concurrent joins overlap as they would on DynamoDB)."""
    commits: list[float] = []
    transact = dynamo.transact

    def slow(writes: Any, **options: Any) -> None:
        commits.append(time.monotonic())
        time.sleep(STORE_LATENCY)
        transact(writes, **options)

    monkeypatch.setattr(dynamo, "transact", slow)
    return commits


def bodies() -> list[dict[str, Any]]:
    return [
        join_body(f"node-{i}", f"10.0.0.{i + 1}", [g * N + i + 1 for g in range(GUESTS)]) for i in range(N)
    ]


def timed_post(body: dict[str, Any], key: str) -> tuple[float, Answer]:
    started = time.monotonic()
    reply = post(body, key, context=Remaining(DEADLINE))
    return time.monotonic() - started, reply


def assert_success_or_retry_hint(reply: Answer) -> None:
    if reply.status == 200:
        assert reply.body["message"] == "node_added_to_cluster"
        return
    assert reply.status == 503, reply.body
    assert reply.body["status"] == "error"
    assert reply.body["message"] == "guest_identity_inventory_unavailable"
    assert "retry_after_seconds=1" in reply.body["error"]
    assert reply.body["data"] is None
    assert reply.headers["retry-after"] == "1"


def test_eight_joins_at_once_answer_within_the_deadline_and_retries_converge(
    key: str, slow_commits: list[float]
) -> None:
    # Given 8 nodes whose guests share the same guest items, on a store slow enough that they
    # cannot all commit within one invocation of DEADLINE seconds
    sent = bodies()
    # When they all join at once
    first = release_together(lambda i: timed_post(sent[i], key), N)
    # Then every answer came within the deadline (plus a small margin) ...
    assert max(elapsed for elapsed, _ in first) <= DEADLINE + MARGIN, [e for e, _ in first]
    # ... and is either success or Sylve's 503 with a retry hint
    for _, reply in first:
        assert_success_or_retry_hint(reply)
    joined = {i for i, (_, reply) in enumerate(first) if reply.status == 200}
    assert joined, "at least one join commits"
    # And each node told to retry that retries (after Retry-After, all together) ends up a member
    rounds = 0
    while len(joined) < N:
        rounds += 1
        assert rounds <= 10, f"no convergence: {sorted(joined)}"
        time.sleep(1)  # Retry-After
        waiting = sorted(set(range(N)) - joined)
        again = release_together(lambda j, waiting=waiting: timed_post(sent[waiting[j]], key), len(waiting))
        for (elapsed, reply), node in zip(again, waiting, strict=True):
            assert elapsed <= DEADLINE + MARGIN
            assert_success_or_retry_hint(reply)
            if reply.status == 200:
                joined.add(node)
    assert [n["nodeId"] for n in cluster_nodes()] == [f"node-{i}" for i in range(N)]
    assert registry() == [(g * N + i + 1, f"node-{i}", "vm") for g in range(GUESTS) for i in range(N)]


def test_a_retry_of_a_join_that_committed_is_answered_as_success(key: str) -> None:
    # Given a node whose join committed (the client may not have seen the answer)
    body = bodies()[0]
    assert post(body, key).status == 200
    # When it sends the same join again, even with little time left
    reply = post(body, key, context=Remaining(1.5))
    # Then it is told it is a member, and nothing is added twice
    assert (reply.status, reply.body["message"]) == (200, "node_added_to_cluster")
    assert len(cluster_nodes()) == 1


def test_a_join_arriving_with_too_little_time_left_is_503_and_writes_nothing(key: str) -> None:
    # Given an invocation with less time left than one attempt needs
    reply = post(bodies()[0], key, context=Remaining(0.5))
    # Then it is Sylve's 503 with a retry hint, and the node is not a member
    assert reply.status == 503
    assert_success_or_retry_hint(reply)
    assert cluster_nodes() == []
    # And its retry with time to spare joins
    assert post(bodies()[0], key).status == 200
    assert len(cluster_nodes()) == 1
