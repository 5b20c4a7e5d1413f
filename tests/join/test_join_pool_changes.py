"""After `pools/update`, every path that hands out a machine's settings uses the pool as
it is now, even in a container that cached the pool before the update (the cache is only ever
trusted through the transaction's version check, and a failed check re-reads the pool)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from joinplane import clock, keyauth
from joinplane.join_requests import ApproveJoinRequest, approve
from tests.support import call, join

NEW_IMAGE = "worker:3.0"
NEW_TTL = 7200


def update_pool(admin_key: str, pool: dict[str, Any]) -> None:
    reply = call(
        "/api/compute/pools/update",
        {
            "tenantId": "acme",
            "poolId": "gpu",
            "bootstrap": {**pool["bootstrap"], "workerImage": NEW_IMAGE},
            "certificateTtlSeconds": NEW_TTL,
        },
        admin_key,
    )
    assert reply.status == 200, reply.body


def lifetime(body: dict[str, Any]) -> float:
    expires = datetime.fromisoformat(body["certificateExpiresAt"].replace("Z", "+00:00"))
    return expires.timestamp() - clock.epoch()


def assert_new_settings(body: dict[str, Any]) -> None:
    assert body["bootstrap"]["workerImage"] == NEW_IMAGE
    assert NEW_TTL - 60 <= lifetime(body) <= NEW_TTL + 60, lifetime(body)


def test_a_new_machine_gets_the_updated_pool(make_token, machine_factory, admin_key, pool) -> None:
    # Given a container that cached the pool on an earlier join
    token = make_token(maxUses=3)
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 200
    # When the pool is updated and another machine joins through the same container
    update_pool(admin_key, pool)
    admitted = join({"joinToken": token["token"], "csr": machine_factory().csr})
    # Then it gets the new image and certificate lifetime
    assert admitted.status == 200, admitted.body
    assert_new_settings(admitted.body)


def test_a_rejoin_gets_the_updated_pool(make_token, machine_factory, admin_key, pool) -> None:
    # Given a machine admitted by a container that cached the pool, with an untouched install
    token = make_token(maxUses=3)
    machine = machine_factory()
    first = join({"joinToken": token["token"], "csr": machine.csr, "workerImage": "worker:2.0"})
    assert first.body["bootstrap"]["workerImage"] == "worker:2.0"
    # When the pool's worker image changes and the machine re-joins
    update_pool(admin_key, pool)
    again = join(
        {"joinToken": token["token"], "csr": machine.csr, "workerImage": "worker:2.0"}, signed_by=machine.key
    )
    # Then the untouched install follows the new image, and the certificate the new lifetime
    assert again.status == 200, again.body
    assert_new_settings(again.body)


def test_consuming_an_approval_gets_the_updated_pool(make_token, machine_factory, admin_key, pool) -> None:
    # Given a deferred machine, approved, in a container that cached the pool
    token = make_token(maxUses=3, requireApproval=True)
    machine = machine_factory()
    request_id = join({"joinToken": token["token"], "csr": machine.csr}).body["joinRequest"]["requestId"]
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    # When the pool changes before the machine's retry consumes the approval
    update_pool(admin_key, pool)
    admitted = join({"joinToken": token["token"], "csr": machine.csr}, signed_by=machine.key)
    # Then the machine leaves with the new settings
    assert admitted.status == 200, admitted.body
    assert_new_settings(admitted.body)


def test_a_renewal_gets_the_updated_lifetime(make_token, machine_factory, admin_key, pool) -> None:
    token = make_token()
    machine = machine_factory()
    admitted = join({"joinToken": token["token"], "csr": machine.csr}).body
    assert 3600 - 60 <= lifetime(admitted) <= 3600 + 60
    update_pool(admin_key, pool)
    renewed = join(
        {"machineToken": admitted["machineToken"], "csr": machine.csr},
        path="/machines/renew",
        signed_by=machine.key,
    )
    assert renewed.status == 200, renewed.body
    assert NEW_TTL - 60 <= lifetime(renewed.body) <= NEW_TTL + 60
