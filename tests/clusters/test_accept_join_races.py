"""Concurrent accept-joins, threads released together against the moto server.

- Nodes claiming one guest ID at once: exactly one joins, the others get the conflict.
- Nodes with disjoint guest IDs in the same guest item: all join (a lost condition re-decides).
- Forced interleaving (every join decides before any commits) still admits exactly one; a naive
  read-then-write commit under the same schedule lets several claim the same ID.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from joinplane.clusters import membership
from joinplane.dal import clusters as clusters_db
from joinplane.dal import dynamo
from tests.support import release_together
from tests.support.clusters import cluster_nodes, join_body, make_cluster, post, registry

N = 8


@pytest.fixture
def key(admin_key: str) -> str:
    return make_cluster(admin_key)


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
    bodies = [join_body(f"node-{i}", f"10.0.0.{i + 1}", [10 * i + 1, 10 * i + 2]) for i in range(N)]
    replies = release_together(lambda i: post(bodies[i], key), N)
    assert [r.status for r in replies] == [200] * N, [r.body for r in replies]
    assert len(registry()) == 2 * N
    assert len(cluster_nodes()) == N


def test_one_address_claimed_by_two_nodes_at_once_admits_one(key: str) -> None:
    bodies = [join_body(f"node-{i}", "10.0.0.1", [i + 1]) for i in range(N)]
    replies = release_together(lambda i: post(bodies[i], key), N)
    assert sorted(r.status for r in replies) == [200] + [409] * (N - 1)
    assert {r.body["error"] for r in replies if r.status == 409} == {"joining_node_address_already_in_use"}
    assert len(cluster_nodes()) == 1


def test_the_same_join_sent_many_times_at_once_adds_the_node_once(key: str) -> None:
    body = join_body("node-a", "10.0.0.1", [1, 2, 3])
    replies = release_together(lambda i: post(body, key), N)
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
    decide_all_before_any_commits(monkeypatch, 2)
    bodies = [join_body("node-a", "10.0.0.1", [7, 8]), join_body("node-b", "10.0.0.2", [8, 9])]
    replies = release_together(lambda i: post(bodies[i], key), 2)
    assert sorted(r.status for r in replies) == [200, 409]
    loser = next(r for r in replies if r.status == 409)
    assert loser.body["message"] == "guest_identity_inventory_conflict"
    assert len({node for _, node, _ in registry()}) == 1


def naive_commit(
    tenant_id: str, pool_id: str, node_id: str, guest_ids: list[int], decided: threading.Barrier
) -> bool:
    """The bug we avoid: read the guest items, check the IDs are free, then write the claims."""
    buckets = clusters_db.buckets(tenant_id, pool_id, range(membership.BUCKETS))
    if any(guest_id in bucket.claims for bucket in buckets.values() for guest_id in guest_ids):
        return False
    decided.wait()
    for guest_id in guest_ids:
        bucket = buckets[clusters_db.bucket_of(guest_id)]
        claims = {**bucket.claims, guest_id: ("vm", node_id)}
        dynamo.put(replace(bucket, claims=claims, version=bucket.version + 1).to_item())
    return True


def test_the_naive_read_then_write_commit_lets_both_claim_one_id(key: str) -> None:
    # Guest item 0 exists already, holding node-0's guest 1
    assert post(join_body("node-0", "10.0.0.100", [1]), key).status == 200
    decided = threading.Barrier(2)
    won = release_together(lambda i: naive_commit("acme", "sylve", f"node-{i + 1}", [7, 8], decided), 2)
    assert won == [True, True]  # both were told guests 7 and 8 were theirs
    assert len({node for guest, node, _ in registry() if guest in (7, 8)}) == 1  # one of them lost them
