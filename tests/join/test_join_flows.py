"""POST /machines/join end to end through the real handler, over moto: admit, defer, retry,
approval, rejection, expiry, re-join, renew, revocation."""

from __future__ import annotations

import subprocess
from pathlib import Path

from joinplane import clock, keyauth
from joinplane.dal import dynamo
from joinplane.dal.tokens import token_key
from joinplane.join_requests import ApproveJoinRequest, DecideJoinRequest, approve, reject
from tests.support import call, join
from tests.support.csr import openssl_verify
from tests.support.table import all_items


def uses_left(token: dict) -> int:
    item = dynamo.get(*token_key(token["tokenId"]))
    assert item is not None
    return int(item["usesRemaining"])


def test_admit_returns_identity_certificate_and_bootstrap(
    make_token, machine_factory, tmp_path: Path
) -> None:
    # Given a pool token and a machine with an openssl-made key
    token = make_token(maxUses=2)
    machine = machine_factory()
    # When it joins with JoinMachine's fields (int64 as strings, as proto3 JSON allows) and a CSR
    reply = join(
        {
            "joinToken": token["token"],
            "machineFingerprint": "fp-1",
            "hostname": "gpu-01",
            "os": "linux",
            "arch": "amd64",
            "cpuCount": "64",
            "memoryMb": "524288",
            "gpuCount": 8,
            "csr": machine.csr,
        }
    )
    # Then it is admitted with JoinMachine's response, every field present
    assert reply.status == 200, reply.body
    body = reply.body
    assert body["ok"] is True and body["errMsg"] == ""
    assert body["workspaceId"] == "ws-42" and body["poolName"] == "GPU pool"
    assert body["machineId"].startswith("mach_") and body["machineToken"].startswith("jpm_")
    boot = body["bootstrap"]
    assert boot["controlplaneHttpUrl"] == "https://cp.example" and boot["controlplaneGrpcPort"] == 443
    assert boot["imageClipVersion"] == "7"  # int64 travels as a string
    assert (
        boot["workspaceId"] == "ws-42"
        and boot["poolName"] == "GPU pool"
        and boot["workerImage"] == "worker:2.0"
    )
    assert set(boot) >= {
        "transport",
        "executor",
        "fallback",
        "disabledServices",
        "imageRegistryStore",
        "imageLocalCacheEnabled",
        "telemetry",
        "billing",
    }
    # And a client certificate that chains to the pool CA and names the machine
    verified = openssl_verify(tmp_path, body["caCertificates"], body["certificate"])
    assert verified.returncode == 0, verified.stdout + verified.stderr
    text = subprocess.run(
        ["openssl", "x509", "-noout", "-text", "-in", str(tmp_path / "machine.crt")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"CN={body['machineId']}" in text.replace(" = ", "=")
    assert f"URI:spiffe://joinplane.internal/tenant/acme/pool/gpu/machine/{body['machineId']}" in text
    assert body["certificateExpiresAt"].endswith("Z")
    # And exactly one use of the token was taken; the machine token is stored only as a digest
    assert uses_left(token) == 1
    assert body["machineToken"] not in str(all_items())


def test_proto_field_names_are_accepted(make_token, machine_factory) -> None:
    # Given a token and a machine
    token = make_token()
    # When it joins with the proto field names (snake_case) instead of their JSON names
    reply = join(
        {
            "join_token": token["token"],
            "machine_fingerprint": "fp",
            "cpu_count": 4,
            "memory_mb": "1024",
            "csr": machine_factory().csr,
        }
    )
    # Then it is admitted as with the JSON names
    assert reply.status == 200, reply.body


def test_token_in_the_authorization_header(make_token, machine_factory) -> None:
    # Given a token, When a machine sends it as a bearer token instead of in the body, Then it joins
    token = make_token()
    assert join({"csr": machine_factory().csr}, bearer=token["token"]).status == 200


def test_deferral_creates_one_request_and_retries_find_it(make_token, machine_factory) -> None:
    # Given a token that requires approval, used by one machine
    token = make_token(requireApproval=True, maxUses=5)
    machine = machine_factory()
    # When it joins
    first = join({"joinToken": token["token"], "hostname": "h1", "csr": machine.csr})
    # Then the join is deferred with a pending request and a retry hint
    assert first.status == 202, first.body
    assert first.body["ok"] is False and first.body["retryAfterSeconds"] > 0
    request = first.body["joinRequest"]
    assert request["state"] == "pending" and request["requestId"].startswith("jreq_")
    assert "approval" in first.body["errMsg"]
    # When it retries (a new CSR for the same key)
    again = join({"joinToken": token["token"], "hostname": "h1", "csr": machine.new_csr()})
    # Then it gets the same request, and the retry took no token use
    assert again.status == 202 and again.body["joinRequest"] == request
    assert uses_left(token) == 4
    stored = [i for i in all_items() if i["pk"].startswith("JREQ#")]
    assert len(stored) == 1 and stored[0]["reasons"][0]["code"] == "approval_required"


def test_a_single_use_token_still_lets_the_approved_retry_through(
    make_token, machine_factory, admin_key
) -> None:
    # Given a single-use token whose only use went to a deferral
    token = make_token(requireApproval=True, maxUses=1)
    machine = machine_factory()
    deferred = join({"joinToken": token["token"], "csr": machine.csr})
    assert deferred.status == 202 and uses_left(token) == 0
    # And another machine is refused: the token is used up
    other = join({"joinToken": token["token"], "csr": machine_factory().csr})
    assert (other.status, other.body["code"], other.reason) == (401, 16, "JOIN_TOKEN_INVALID")
    # When an operator approves the request
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approved = approve(
        admin,
        ApproveJoinRequest(
            tenantId="acme", poolId="gpu", requestId=deferred.body["joinRequest"]["requestId"]
        ),
    )
    assert approved["state"] == "approved" and approved["decidedBy"] == admin.key_id
    # Then the machine's retry is admitted and consumes the approval
    admitted = join({"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key)
    assert admitted.status == 200, admitted.body
    request = dynamo.get(f"JREQ#{deferred.body['joinRequest']['requestId']}", "JREQ")
    assert (
        request is not None
        and request["state"] == "consumed"
        and request["machineId"] == admitted.body["machineId"]
    )
    # And a later join with the same key is a re-join of that machine, not a second admission
    rejoin = join({"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key)
    assert rejoin.status == 200 and rejoin.body["machineId"] == admitted.body["machineId"]


def test_rejected_and_expired_requests_refuse_the_retry(make_token, machine_factory, admin_key) -> None:
    # Given two deferred machines, one whose request an operator rejects
    admin = keyauth.verify(admin_key)
    assert admin is not None
    token = make_token(requireApproval=True, maxUses=3)
    rejected_machine, expiring_machine = machine_factory(), machine_factory()
    r1 = join({"joinToken": token["token"], "csr": rejected_machine.csr}).body["joinRequest"]["requestId"]
    r2 = join({"joinToken": token["token"], "csr": expiring_machine.csr}).body["joinRequest"]["requestId"]
    reject(admin, DecideJoinRequest(tenantId="acme", poolId="gpu", requestId=r1, reason="unknown rack"))
    # When the rejected machine retries
    refused = join({"joinToken": token["token"], "csr": rejected_machine.csr})
    assert (refused.status, refused.body["code"], refused.reason) == (
        403,
        7,
        "JOIN_REQUEST_REJECTED",
    ) and "unknown rack" in refused.body["message"]
    # Then it is refused with the operator's reason
    assert refused.metadata == {"requestId": r1, "rejectionReason": "unknown rack"}
    # When the other machine's approval (60 s TTL) is left alone past its TTL
    # Then its retry is refused as expired: by the clock alone
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=r2, ttlSeconds=60))
    clock.advance(61)
    late = join({"joinToken": token["token"], "csr": expiring_machine.csr})
    assert (late.status, late.body["code"], late.reason) == (
        403,
        7,
        "JOIN_REQUEST_EXPIRED",
    ) and "expired" in late.body["message"]
    assert late.metadata == {"requestId": r2}


def test_rejoin_rotates_the_machine_token_and_renew_issues_certificates(
    make_token, machine_factory, tmp_path: Path
) -> None:
    # Given an admitted machine whose single-use token is now used up
    token = make_token(maxUses=1)
    machine = machine_factory()
    first = join({"joinToken": token["token"], "csr": machine.csr, "workerImage": "worker:1.0"})
    assert first.status == 200
    # The first image sent is the baseline: sending it follows the pool's current image
    assert first.body["bootstrap"]["workerImage"] == "worker:2.0"
    # When it re-joins with the same key: Then it is the same machine, with a new machine token
    second = join(
        {"joinToken": token["token"], "csr": machine.new_csr(), "workerImage": "worker:custom"},
        signed_by=machine.key,
    )
    assert second.status == 200, second.body
    assert second.body["machineId"] == first.body["machineId"]
    assert second.body["machineToken"] != first.body["machineToken"]
    assert second.body["bootstrap"]["workerImage"] == "worker:custom"  # pinned: handed back as sent
    # And the old machine token stops working while the new one renews the certificate
    stale = join(
        {"machineToken": first.body["machineToken"], "csr": machine.csr},
        path="/machines/renew",
        signed_by=machine.key,
    )
    assert (stale.status, stale.body["code"], stale.reason) == (401, 16, "MACHINE_TOKEN_INVALID")
    renewed = join(
        {"machineToken": second.body["machineToken"], "csr": machine.new_csr()},
        path="/machines/renew",
        signed_by=machine.key,
    )
    assert renewed.status == 200, renewed.body
    assert openssl_verify_ok(tmp_path, renewed.body)


def openssl_verify_ok(tmp_path: Path, body: dict) -> bool:
    return openssl_verify(tmp_path, body["caCertificates"], body["certificate"]).returncode == 0


def test_a_revoked_machine_cannot_rejoin_or_renew(make_token, machine_factory, admin_key) -> None:
    # Given an admitted machine that an operator revokes
    token = make_token(maxUses=3)
    machine = machine_factory()
    admitted = join({"joinToken": token["token"], "csr": machine.csr}).body
    revoked = call(
        "/api/compute/machines/revoke",
        {"tenantId": "acme", "machineId": admitted["machineId"], "reason": "stolen"},
        admin_key,
    )
    assert revoked.status == 200 and revoked.body["state"] == "revoked"
    # When it re-joins, or renews, Then both are refused as revoked, and neither took a token use
    again = join({"joinToken": token["token"], "csr": machine.new_csr()})
    assert (again.status, again.body["code"], again.reason) == (403, 7, "MACHINE_REVOKED")
    renew = join({"machineToken": admitted["machineToken"], "csr": machine.csr}, path="/machines/renew")
    assert (renew.status, renew.body["code"], renew.reason) == (403, 7, "MACHINE_REVOKED")
    assert uses_left(token) == 2


def test_archived_pool_refuses_joins(make_token, machine_factory, admin_key) -> None:
    # Given a token of a pool that is then archived
    token = make_token()
    call("/api/compute/pools/archive", {"tenantId": "acme", "poolId": "gpu"}, admin_key)
    # When a machine joins with it
    reply = join({"joinToken": token["token"], "csr": machine_factory().csr})
    # Then it is refused as the pool is archived, and the token keeps its use
    assert (reply.status, reply.body["code"], reply.reason) == (400, 9, "POOL_ARCHIVED")
    assert uses_left(token) == 1


def test_every_token_refusal_reads_the_same(make_token, machine_factory, admin_key) -> None:
    # Given a revoked, an expired and a used-up token, and secrets that were never tokens
    revoked, expired, used = make_token(), make_token(ttlSeconds=60), make_token()
    call("/api/compute/joinTokens/revoke", {"tenantId": "acme", "tokenId": revoked["tokenId"]}, admin_key)
    assert join({"joinToken": used["token"], "csr": machine_factory().csr}).status == 200
    clock.advance(61)
    cases = [
        revoked["token"],
        expired["token"],
        used["token"],
        "jpt_nonsense",
        used["token"][:-3] + "aaa",
        "",
        "jpk_" + used["token"][4:],
    ]
    # When a machine joins with each
    replies = [join({"joinToken": secret, "csr": machine_factory().csr}) for secret in cases]
    # Then every refusal is the same, word for word: none tells a guesser which tokens exist
    assert all((r.body["code"], r.reason) == (16, "JOIN_TOKEN_INVALID") for r in replies)
    assert len({r.body["message"] for r in replies}) == 1


def test_preflight_fatal_stores_nothing_and_error_is_unschedulable(make_token, machine_factory) -> None:
    # Given a token
    token = make_token(maxUses=2)
    before = all_items()
    # When a machine joins reporting a fatal preflight failure, Then it is refused and nothing is stored
    fatal = join(
        {
            "joinToken": token["token"],
            "csr": machine_factory().csr,
            "preflight": [{"name": "nvidia-driver", "ok": False, "message": "missing", "severity": "fatal"}],
        }
    )
    assert (fatal.status, fatal.body["code"], fatal.reason) == (
        400,
        9,
        "PREFLIGHT_FAILED",
    ) and "nvidia-driver" in fatal.body["message"]
    assert all_items() == before
    # When one joins reporting only error and warning failures, Then it joins, marked unschedulable
    soft = join(
        {
            "joinToken": token["token"],
            "csr": machine_factory().csr,
            "preflight": [
                {"name": "disk", "ok": False, "severity": "error"},
                {"name": "ntp", "ok": False, "severity": "warning"},
            ],
        }
    )
    assert soft.status == 200 and soft.body["schedulable"] is False


def test_dry_run_gives_the_verdict_and_changes_nothing(make_token, machine_factory) -> None:
    # Given a token that requires approval
    token = make_token(requireApproval=True)
    before = all_items()
    # When a machine joins as a dry run
    reply = join({"joinToken": token["token"], "csr": machine_factory().csr, "dryRun": True})
    # Then it is told it would be deferred and why, and nothing is stored
    assert reply.status == 200 and reply.body["verdict"] == "defer" and reply.body["ok"] is False
    assert reply.body["reasons"][0]["code"] == "approval_required"
    assert all_items() == before
