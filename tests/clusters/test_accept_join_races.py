"""Concurrent accept-joins, threads released together against the moto server.

- Nodes claiming one guest ID at once: exactly one joins, the others get the conflict.
- Nodes with disjoint guest IDs in the same guest item: all join (a lost condition re-decides).
- Forced interleaving (every join decides before any commits) still admits exactly one. That a
  read-then-write commit loses such a race is the harness's own check
  (tests/harness/test_race_harness.py), not repeated here.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from joinplane.dal import dynamo
from tests.support import release_together
from tests.support.clusters import cluster_nodes, join_body, post, registry

N = 8


def test_overlapping_joins_at_once_admit_exactly_one(key: str) -> None:
    # Given N nodes that all hold guest 500, each with guests of its own besides
    bodies = [join_body(f"node-{i}", f"10.0.0.{i + 1}", [500, 1000 + i]) for i in range(N)]
    # When they join at once
    replies = release_together(lambda i: post(bodies[i], key), N)
    # Then exactly one is added; every other one is told about the conflict on guest 500
    winners = [i for i, r in enumerate(replies) if r.status == 200]
    assert len(winners) == 1, [(r.status, r.body["message"]) for r in replies]
    winner = f"node-{winners[0]}"
    for reply in replies:
        if reply.status != 200:
            assert (reply.status, reply.body["message"]) == (409, "guest_identity_inventory_conflict")
            (conflict,) = reply.body["data"]["conflicts"]
            assert conflict["guestId"] == 500 and conflict["reason"] == "shared_guest_id"
            assert {e["nodeId"] for e in conflict["entries"]} >= {winner}
    # And the registry holds the winner's claims only, all of them
    assert registry() == [(500, winner, "vm"), (1000 + winners[0], winner, "vm")]
    assert [n["nodeId"] for n in cluster_nodes()] == [winner]


def test_disjoint_joins_into_one_guest_item_all_commit(key: str) -> None:
    # Given N nodes whose guest IDs differ but all fall in one guest item
    bodies = [join_body(f"node-{i}", f"10.0.0.{i + 1}", [10 * i + 1, 10 * i + 2]) for i in range(N)]
    # When they join at once
    replies = release_together(lambda i: post(bodies[i], key), N)
    # Then all join, and every claim is kept: a join that lost the item's condition decided again
    assert [r.status for r in replies] == [200] * N, [r.body for r in replies]
    assert len(registry()) == 2 * N
    assert len(cluster_nodes()) == N


def test_one_address_claimed_by_two_nodes_at_once_admits_one(key: str) -> None:
    # Given N nodes that all give the same address
    bodies = [join_body(f"node-{i}", "10.0.0.1", [i + 1]) for i in range(N)]
    # When they join at once
    replies = release_together(lambda i: post(bodies[i], key), N)
    # Then one joins and every other is told the address is taken
    assert sorted(r.status for r in replies) == [200] + [409] * (N - 1)
    assert {r.body["error"] for r in replies if r.status == 409} == {"joining_node_address_already_in_use"}
    assert len(cluster_nodes()) == 1


def test_the_same_join_sent_many_times_at_once_adds_the_node_once(key: str) -> None:
    # Given one node's join
    body = join_body("node-a", "10.0.0.1", [1, 2, 3])
    # When it is sent N times at once
    replies = release_together(lambda i: post(body, key), N)
    # Then every copy is answered as the join, and the node is there once
    assert [r.status for r in replies] == [200] * N
    assert len(cluster_nodes()) == 1


def decide_all_before_any_commits(monkeypatch: pytest.MonkeyPatch, parties: int) -> None:
    """Hold each thread's first commit until every thread has decided: the schedule in which a
    read-then-write commit goes wrong."""
    barrier = threading.Barrier(parties)
    held = threading.local()
    transact = dynamo.transact

    def after_everyone_decided(writes: Any, **options: Any) -> None:
        if not getattr(held, "done", False):
            held.done = True
            barrier.wait()
        transact(writes, **options)

    monkeypatch.setattr(dynamo, "transact", after_everyone_decided)


def test_with_every_join_deciding_first_exactly_one_still_wins(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two nodes that both hold guest 8, and a schedule in which both decide before either commits
    decide_all_before_any_commits(monkeypatch, 2)
    bodies = [join_body("node-a", "10.0.0.1", [7, 8]), join_body("node-b", "10.0.0.2", [8, 9])]
    # When they join at once
    replies = release_together(lambda i: post(bodies[i], key), 2)
    # Then one joins and the other gets the conflict: the commit's condition, not the decision, decides
    assert sorted(r.status for r in replies) == [200, 409]
    loser = next(r for r in replies if r.status == 409)
    assert loser.body["message"] == "guest_identity_inventory_conflict"
    assert len({node for _, node, _ in registry()}) == 1
