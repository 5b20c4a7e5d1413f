"""Races on joins: threads released together against the moto server.

- A token with maxUses K under N >> K concurrent joins of distinct machines admits or defers
  exactly K; a naive read-check-write of the counter lets more through.
- N concurrent retries of one approved identity admit exactly one; a naive consume (read the
  request, check it is approved, then write it consumed) admits several.
"""

from __future__ import annotations

from joinplane import keyauth, store
from joinplane.dal.requests import request_key
from joinplane.dal.tokens import token_key
from joinplane.join_requests import ApproveJoinRequest, approve
from tests.support import join, release_together

N = 24
K = 3


def test_a_token_with_k_uses_admits_exactly_k_of_n_concurrent_joins(make_token, machine_factory) -> None:
    # Given a token with K uses and N distinct machines
    token = make_token(maxUses=K)
    csrs = [machine_factory().csr for _ in range(N)]
    # When they all join at once
    replies = release_together(lambda i: join({"joinToken": token["token"], "csr": csrs[i]}), N)
    # Then exactly K are admitted, the rest refused as the token is used up, and the counter is 0
    assert sorted(r.status for r in replies) == [200] * K + [401] * (N - K)
    item = store.get(*token_key(token["tokenId"]))
    assert item is not None and item["usesRemaining"] == 0
    assert len({r.body["machineId"] for r in replies if r.status == 200}) == K


def test_deferrals_count_against_the_token_the_same_way(make_token, machine_factory) -> None:
    token = make_token(maxUses=K, requireApproval=True)
    csrs = [machine_factory().csr for _ in range(N)]
    replies = release_together(lambda i: join({"joinToken": token["token"], "csr": csrs[i]}), N)
    assert sorted(r.status for r in replies) == [202] * K + [401] * (N - K)


def naive_take_use(token_id: str) -> bool:
    """The bug we avoid: read the counter, check it, write it back decremented."""
    item = store.get(*token_key(token_id))
    assert item is not None
    if item["usesRemaining"] <= 0:
        return False
    store.update(
        *token_key(token_id),
        update="SET usesRemaining = :left",
        values={":left": item["usesRemaining"] - 1},
    )
    return True


def test_the_naive_counter_lets_more_than_k_through(make_token) -> None:
    token = make_token(maxUses=K)
    taken = release_together(lambda i: naive_take_use(token["tokenId"]), N)
    assert sum(taken) > K


def test_concurrent_retries_of_one_approval_admit_exactly_one(make_token, machine_factory, admin_key) -> None:
    # Given one machine whose deferred request an operator approved
    token = make_token(requireApproval=True)
    machine = machine_factory()
    request_id = join({"joinToken": token["token"], "csr": machine.csr}).body["joinRequest"]["requestId"]
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    csrs = [machine.new_csr() for _ in range(12)]
    # When 12 retries arrive at once
    replies = release_together(
        lambda i: join({"joinToken": token["token"], "csr": csrs[i]}, signed_by=machine.key), 12
    )
    # Then exactly one is admitted; the others are told a concurrent join won (ABORTED, retryable)
    admitted = [r for r in replies if r.status == 200]
    assert len(admitted) == 1, [(r.status, r.body.get("message")) for r in replies]
    assert all(
        (r.status, r.body["code"], r.reason) == (409, 10, "CONCURRENT_CHANGE")
        for r in replies
        if r.status != 200
    )
    request = store.get(*request_key(request_id))
    assert request is not None and request["machineId"] == admitted[0].body["machineId"]
    machines = store.query(pk="MACHINES#acme#gpu", index="gsi1").items
    assert len(machines) == 1


def naive_consume(request_id: str) -> bool:
    """The bug we avoid: read the request, check it is approved, then mark it consumed."""
    item = store.get(*request_key(request_id))
    assert item is not None
    if item["state"] != "approved":
        return False
    store.update(
        *request_key(request_id),
        update="SET #s = :consumed",
        names={"#s": "state"},
        values={":consumed": "consumed"},
    )
    return True


def test_the_naive_consume_admits_several(make_token, machine_factory, admin_key) -> None:
    token = make_token(requireApproval=True)
    request_id = join({"joinToken": token["token"], "csr": machine_factory().csr}).body["joinRequest"][
        "requestId"
    ]
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    consumed = release_together(lambda i: naive_consume(request_id), 12)
    assert sum(consumed) > 1
