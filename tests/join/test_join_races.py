"""Races on joins: threads released together against the moto server.

- A token with maxUses K under N >> K concurrent joins of distinct machines admits or defers
  exactly K.
- N concurrent retries of one approved identity admit exactly one.

That a read-check-write counter or consume would let more through under the same release is the
harness's own check (tests/harness/test_race_harness.py: k-uses, create-once), so a pass here means
the join kept the guarantee.
"""

from __future__ import annotations

from joinplane import keyauth
from joinplane.dal import dynamo
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
    item = dynamo.get(*token_key(token["tokenId"]))
    assert item is not None and item["usesRemaining"] == 0
    assert len({r.body["machineId"] for r in replies if r.status == 200}) == K


def test_deferrals_count_against_the_token_the_same_way(make_token, machine_factory) -> None:
    # Given a token with K uses that requires approval, and N distinct machines
    token = make_token(maxUses=K, requireApproval=True)
    csrs = [machine_factory().csr for _ in range(N)]
    # When they all join at once
    replies = release_together(lambda i: join({"joinToken": token["token"], "csr": csrs[i]}), N)
    # Then exactly K are deferred and the rest refused as the token is used up
    assert sorted(r.status for r in replies) == [202] * K + [401] * (N - K)


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
    request = dynamo.get(*request_key(request_id))
    assert request is not None and request["machineId"] == admitted[0].body["machineId"]
    machines = dynamo.query(pk="MACHINES#acme#gpu", index="gsi1").items
    assert len(machines) == 1
