"""Rules about a join identity's history, each found by review and kept by a test: another pool's
token cannot use it, a dry run never says more than the join, a retired key stays banned, hardware
ids follow the machine, a rejection carries its own reason, and odd input is a 3, not a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest

from joinplane import events
from joinplane.dal import dynamo
from joinplane.dal.requests import request_key
from joinplane.dal.tokens import token_key
from tests.support import call, join, sign_proof
from tests.support.table import all_items


def approve(admin_key: str, request_id: str, **extra: Any) -> dict[str, Any]:
    reply = call(
        "/api/compute/joinRequests/approve",
        {"tenantId": "acme", "poolId": "gpu", "requestId": request_id, **extra},
        admin_key,
    )
    assert reply.status == 200, reply.body
    return dict(reply.body)


def test_another_pools_token_cannot_consume_or_see_a_request(
    make_token, machine_factory, admin_key, other_pool
) -> None:
    machine = machine_factory()
    deferred = join({"joinToken": make_token(requireApproval=True)["token"], "csr": machine.csr})
    request_id = deferred.body["joinRequest"]["requestId"]
    peek = join({"joinToken": other_pool, "csr": machine.csr})
    assert (peek.status, peek.body["code"], peek.reason, peek.metadata) == (
        400,
        9,
        "WRONG_POOL",
        {},
    ) and request_id not in peek.body["message"]
    approve(admin_key, request_id)
    consume = join({"joinToken": other_pool, "csr": machine.csr})
    assert (consume.status, consume.body["code"], consume.reason) == (400, 9, "WRONG_POOL")
    assert dynamo.get(*request_key(request_id))["state"] == "approved"


def test_a_dry_run_never_says_more_than_the_join(make_token, admin_key, other_pool) -> None:
    used = make_token(maxUses=1)
    assert join({"joinToken": used["token"], "machineFingerprint": "fp-x"}).status == 200
    # A used-up token does not answer for a known machine it did not admit... it did admit it:
    # a dry run through it is answered like the join (a re-join of its own machine)
    assert (
        join({"joinToken": used["token"], "machineFingerprint": "fp-x", "dryRun": True}).body["verdict"]
        == "admit"
    )
    # Another pool's token: the dry run is refused exactly as the join is
    dry = join({"joinToken": other_pool, "machineFingerprint": "fp-x", "dryRun": True})
    real = join({"joinToken": other_pool, "machineFingerprint": "fp-x"})
    assert (
        (dry.status, dry.body["code"], dry.reason)
        == (real.status, real.body["code"], real.reason)
        == (
            400,
            9,
            "WRONG_POOL",
        )
    )
    # A used-up token never learns whether a fingerprint it did not admit is known
    other = make_token(maxUses=1)
    assert join({"joinToken": other["token"], "machineFingerprint": "fp-y"}).status == 200
    probe = join({"joinToken": other["token"], "machineFingerprint": "fp-x", "dryRun": True})
    assert (probe.status, probe.body["code"], probe.reason) == (401, 16, "JOIN_TOKEN_INVALID")


def test_a_rejection_does_not_carry_the_approvals_reason(make_token, machine_factory, admin_key) -> None:
    request_id = join(
        {"joinToken": make_token(requireApproval=True)["token"], "csr": machine_factory().csr}
    ).body["joinRequest"]["requestId"]
    approve(admin_key, request_id, reason="known rack")
    old = dynamo.get(*request_key(request_id))
    reply = call(
        "/api/compute/joinRequests/reject",
        {"tenantId": "acme", "poolId": "gpu", "requestId": request_id},
        admin_key,
    )
    new = dynamo.get(*request_key(request_id))
    event = events.from_stream_record(
        {
            "dynamodb": {
                "OldImage": dynamo.serialize(old),
                "NewImage": dynamo.serialize(new),
                "SequenceNumber": "1",
            }
        }
    )
    assert event is not None and event.detail_type == "security.join-request.rejected"
    assert "reason" not in event.detail and reply.body["reason"] is None


def test_hardware_ids_follow_the_machine_on_rejoin(make_token, machine_factory) -> None:
    token = make_token(maxUses=5)
    machine = machine_factory()
    first = join({"joinToken": token["token"], "csr": machine.csr, "hardware": {"serialNumber": "SN-AAA111"}})
    moved = join(
        {"joinToken": token["token"], "csr": machine.csr, "hardware": {"serialNumber": "SN-BBB222"}},
        signed_by=machine.key,
    )
    assert moved.status == 200 and moved.body["machineId"] == first.body["machineId"]
    clone = join(
        {"joinToken": token["token"], "csr": machine_factory().csr, "hardware": {"serialNumber": "SN-BBB222"}}
    )
    assert clone.status == 202  # the new serial is held
    freed = join(
        {"joinToken": token["token"], "csr": machine_factory().csr, "hardware": {"serialNumber": "SN-AAA111"}}
    )
    assert freed.status == 200  # the old one was released


def test_a_key_retired_by_renewal_stays_banned(make_token, machine_factory, admin_key) -> None:
    token = make_token(maxUses=5)
    old_key, new_key = machine_factory(), machine_factory()
    admitted = join({"joinToken": token["token"], "csr": old_key.csr}).body
    renewed = join(
        {"machineToken": admitted["machineToken"], "csr": new_key.csr},
        path="/machines/renew",
        proof=sign_proof(
            old_key.key,
            purpose="renew",
            credential=admitted["machineToken"],
            body=json.dumps({"machineToken": admitted["machineToken"], "csr": new_key.csr}).encode(),
            public_key=old_key.key,
            new_key=new_key.key,
        ),
    )
    assert renewed.status == 200, renewed.body
    retired = join({"joinToken": token["token"], "csr": old_key.csr}, signed_by=old_key.key)
    assert (retired.status, retired.body["code"], retired.reason) == (403, 7, "KEY_RETIRED")
    call("/api/compute/machines/revoke", {"tenantId": "acme", "machineId": admitted["machineId"]}, admin_key)
    assert (
        join({"joinToken": token["token"], "csr": old_key.csr}, signed_by=old_key.key).reason == "KEY_RETIRED"
    )
    revoked = join({"joinToken": token["token"], "csr": new_key.csr}, signed_by=new_key.key)
    assert (revoked.status, revoked.reason) == (403, "MACHINE_REVOKED")


def test_a_reject_that_lost_to_an_approval_lands_in_the_right_listing(
    make_token, machine_factory, admin_key, monkeypatch
) -> None:
    call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "gpu-b", "siteId": "rack-1", "name": "B", "workspaceId": "w"},
        admin_key,
    )
    request_id = join({"joinToken": make_token(siteId="rack-1")["token"], "csr": machine_factory().csr}).body[
        "joinRequest"
    ]["requestId"]
    stale = dynamo.get(*request_key(request_id))  # read before the approval lands
    approve(admin_key, request_id)
    real_get = dynamo.get
    served = {"stale": False}

    def get_once_stale(pk: str, sk: str, **kw: Any) -> Any:
        if pk == f"JREQ#{request_id}" and not served["stale"]:
            served["stale"] = True
            return stale
        return real_get(pk, sk, **kw)

    monkeypatch.setattr(dynamo, "get", get_once_stale)
    reply = call(
        "/api/compute/joinRequests/reject",
        {"tenantId": "acme", "poolId": "gpu", "requestId": request_id},
        admin_key,
    )
    monkeypatch.setattr(dynamo, "get", real_get)
    assert reply.status == 200 and reply.body["poolId"] == "gpu" and reply.body["state"] == "rejected"
    sibling = call(
        "/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "gpu-b", "state": "all"}, admin_key
    ).body
    assert sibling["requests"] == []
    own = call(
        "/api/compute/joinRequests/list",
        {"tenantId": "acme", "poolId": "gpu", "state": "rejected"},
        admin_key,
    ).body
    assert [r["requestId"] for r in own["requests"]] == [request_id]


ODD = {
    "a 5000-digit integer": lambda token, csr: (
        b'{"joinToken": "' + token.encode() + b'", "cpuCount": ' + b"9" * 5000 + b"}"
    ),
    "a lone surrogate in the fingerprint": lambda token, csr: json.dumps(
        {"joinToken": token, "machineFingerprint": "\ud800"}
    ).encode(),
    "a lone surrogate in the hostname": lambda token, csr: json.dumps(
        {"joinToken": token, "csr": csr, "hostname": "\ud800"}
    ).encode(),
    "a lone surrogate in the serial": lambda token, csr: json.dumps(
        {"joinToken": token, "csr": csr, "hardware": {"serialNumber": "\ud800ABC"}}
    ).encode(),
    "a lone surrogate in a preflight name": lambda token, csr: json.dumps(
        {"joinToken": token, "csr": csr, "preflight": [{"name": "\ud800", "ok": False, "severity": "fatal"}]}
    ).encode(),
    "5,000 levels of nesting": lambda token, csr: b"[" * 5_000 + b"]" * 5_000,
}


@pytest.mark.parametrize("case", list(ODD))
def test_odd_json_is_invalid_argument_and_writes_nothing(case: str, make_token, machine_factory) -> None:
    token = make_token()
    body = ODD[case](token["token"], machine_factory().csr)
    before = all_items()
    reply = join(None, raw=body)
    assert (reply.status, reply.body["code"], reply.reason) == (400, 3, "VALIDATION_FAILED"), reply.body
    assert all_items() == before


def test_another_pools_token_is_not_told_where_the_key_belongs(
    make_token, machine_factory, admin_key, other_pool
) -> None:
    # Given one key with a machine in pool gpu and another with a request there
    joined, waiting = machine_factory(), machine_factory()
    assert join({"joinToken": make_token()["token"], "csr": joined.csr}).status == 200
    join({"joinToken": make_token(requireApproval=True)["token"], "csr": waiting.csr})
    # When the holder of another pool's token presents either key
    replies = [join({"joinToken": other_pool, "csr": m.csr}) for m in (joined, waiting)]
    # Then both get the same code 9 and the same words, which name neither a machine nor a request
    assert [(r.status, r.body["code"], r.reason, r.metadata) for r in replies] == [
        (400, 9, "WRONG_POOL", {})
    ] * 2
    assert replies[0].body["message"] == replies[1].body["message"]
    assert not {"machine", "request", "mach_", "jreq_"} & set(
        replies[0].body["message"].replace(",", " ").split()
    )


def test_a_body_token_and_a_bearer_token_that_differ_are_refused(make_token, machine_factory) -> None:
    # Given two valid tokens of the pool
    first, second = make_token(), make_token()
    # When a join names one in the body and the other in the Authorization header
    reply = join({"joinToken": first["token"], "csr": machine_factory().csr}, bearer=second["token"])
    # Then it is a clear 400, and neither token lost a use
    assert (reply.status, reply.body["code"], reply.reason) == (
        400,
        3,
        "VALIDATION_FAILED",
    ) and "differ" in reply.body["message"]
    for token in (first, second):
        item = dynamo.get(*token_key(token["tokenId"]))
        assert item is not None and item["usesRemaining"] == 1
    # And the same token in both places is fine
    same = join({"joinToken": first["token"], "csr": machine_factory().csr}, bearer=first["token"])
    assert same.status == 200


def test_a_dry_run_of_a_known_machine_follows_the_join_into_its_pool(make_token, admin_key) -> None:
    # Given a machine admitted through a token it used up, and its pool archived since
    used = make_token(maxUses=1)
    body = {"joinToken": used["token"], "machineFingerprint": "fp-z"}
    assert join(body).status == 200
    call("/api/compute/pools/archive", {"tenantId": "acme", "poolId": "gpu"}, admin_key)
    # When it re-joins, and then asks for a dry run of that re-join (after the join: a dry run has no
    # transaction to catch the container's cached pool being stale, the join reads it again)
    real = join(body)
    dry = join({**body, "dryRun": True})
    # Then the dry run is refused as the re-join is, not admitted
    assert (dry.status, dry.reason) == (real.status, real.reason) == (400, "POOL_ARCHIVED")


# --- Tenants: a key's history in one tenant is neither seen nor used by another ------------------


def test_a_key_banned_in_one_tenant_is_a_new_key_to_another_which_learns_nothing_of_the_ban(
    admin_key, make_token, machine_factory
) -> None:
    # Given a machine of tenant acme, revoked there: its key is banned in acme
    machine = machine_factory()
    token = make_token()["token"]
    admitted = join({"joinToken": token, "csr": machine.csr})
    assert admitted.status == 200, admitted.body
    revoked = call(
        "/api/compute/machines/revoke",
        {"tenantId": "acme", "machineId": admitted.body["machineId"]},
        admin_key,
    )
    assert revoked.status == 200, revoked.body
    raw = json.dumps({"joinToken": token, "csr": machine.csr}).encode()
    proof = sign_proof(machine.key, purpose="join", credential=token, body=raw)
    assert join(None, raw=raw, proof=proof).reason == "MACHINE_REVOKED"
    # And a pool of tenant globex, which has never seen the key, and a key new everywhere
    globex = globex_token(admin_key)
    stranger = machine_factory()

    # When both keys ask globex, dry run first
    dry = [join({"joinToken": globex, "csr": m.csr, "dryRun": True}) for m in (machine, stranger)]
    # Then globex answers the key acme banned exactly as it answers the new one: acme's decisions
    # about its own fleet are not globex's to learn
    assert [(d.status, d.body["verdict"], d.body["reasons"]) for d in dry] == [(200, "admit", [])] * 2
    joined = [join({"joinToken": globex, "csr": m.csr}) for m in (machine, stranger)]
    assert [(j.status, j.body["ok"]) for j in joined] == [(200, True)] * 2
    # And acme's ban stands, untouched by what globex did
    raw = json.dumps({"joinToken": token, "csr": machine.csr}).encode()
    proof = sign_proof(machine.key, purpose="join", credential=token, body=raw)
    assert join(None, raw=raw, proof=proof).reason == "MACHINE_REVOKED"


def test_a_proofless_first_join_elsewhere_binds_nothing_its_sender_can_use_without_the_key(
    admin_key, make_token, machine_factory
) -> None:
    # Given a machine active in tenant acme, and a copy of its CSR in other hands
    machine = machine_factory()
    admitted = join({"joinToken": make_token()["token"], "csr": machine.csr})
    assert admitted.status == 200, admitted.body
    # When someone holding a token of tenant globex joins with that CSR, without a proof (a first join)
    squatted = join({"joinToken": globex_token(admin_key), "csr": machine.csr})
    # Then globex admits it as any first join, but every later use needs the key: a renewal without
    # a proof by it is refused, and the certificate is worthless without the private key
    assert squatted.status == 200, squatted.body
    bare = join({"machineToken": squatted.body["machineToken"], "csr": machine.csr}, path="/machines/renew")
    assert (bare.status, bare.reason) == (401, "PROOF_REQUIRED")
    # And the machine in acme is untouched: its holder renews with a proof, as before
    body = json.dumps({"machineToken": admitted.body["machineToken"], "csr": machine.new_csr()}).encode()
    proof = sign_proof(machine.key, purpose="renew", credential=admitted.body["machineToken"], body=body)
    renewed = join(None, raw=body, proof=proof, path="/machines/renew")
    assert renewed.status == 200, renewed.body
    assert renewed.body["machineId"] == admitted.body["machineId"]


def globex_token(admin_key: str) -> str:
    """A join token (5 uses) of pool gpu of tenant globex (made by the platform admin)."""
    pool = {"tenantId": "globex", "poolId": "gpu"}
    created = call(
        "/api/compute/pools/create", {**pool, "siteId": "s", "name": "GPU", "workspaceId": "w"}, admin_key
    )
    assert created.status == 200, created.body
    reply = call("/api/compute/joinTokens/create", {**pool, "maxUses": 5}, admin_key)
    assert reply.status == 200, reply.body
    return str(reply.body["token"])
