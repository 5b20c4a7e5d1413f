"""Credentials for an identity that already exists need a fresh, single-use proof of
possession of its key (docs/join.md, "Proof of possession"). The first join of a new key keeps
levers9 JoinMachine's shape; a fingerprint-only join keeps working unless its token requires a key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from joinplane import clock, keyauth
from joinplane.dal import dynamo
from joinplane.join_requests import ApproveJoinRequest, approve
from tests.support import LambdaContext, call, http_event, join, load_function, release_together, sign_proof
from tests.support.table import all_items


def rejoin_body(token: dict[str, Any], machine: Any) -> dict[str, Any]:
    return {"joinToken": token["token"], "csr": machine.csr, "hostname": "gpu-01"}


def signed(machine: Any, credential: str, body: dict[str, Any], **options: Any) -> tuple[bytes, str]:
    raw = json.dumps(body).encode()
    return raw, sign_proof(machine.key, purpose="join", credential=credential, body=raw, **options)


def machine_record(machine_id: str) -> dict[str, Any]:
    item = dynamo.get(f"MACHINE#{machine_id}", "MACHINE")
    assert item is not None
    return item


# --- the first join and the re-join ------------------------------------------------------------


def test_a_first_join_needs_no_proof_and_a_rejoin_without_one_gets_nothing(
    make_token, machine_factory
) -> None:
    # Given a machine admitted with a plain CSR (JoinMachine's shape plus csr: no proof)
    token = make_token(maxUses=5)
    machine = machine_factory()
    first = join(rejoin_body(token, machine))
    assert first.status == 200
    before = machine_record(first.body["machineId"])
    # When the same body is replayed, as it was and with the pool's other token
    other = make_token(maxUses=5)
    replays = [join(rejoin_body(token, machine)), join(rejoin_body(other, machine))]
    # Then neither gets a machine token or a certificate, and the machine is untouched
    for reply in replays:
        assert (reply.status, reply.body["code"], reply.reason) == (401, 16, "PROOF_REQUIRED"), reply.body
        assert "proof" in reply.body["message"] and "machineToken" not in reply.body
    assert machine_record(first.body["machineId"]) == before


def test_a_rejoin_with_a_fresh_proof_rotates_the_token(make_token, machine_factory) -> None:
    token = make_token(maxUses=1)
    machine = machine_factory()
    first = join(rejoin_body(token, machine))
    # When the machine proves its key (the token is used up: its own re-joins still pass)
    again = join(rejoin_body(token, machine), signed_by=machine.key)
    # Then it is the same machine with a new machine token
    assert again.status == 200, again.body
    assert again.body["machineId"] == first.body["machineId"]
    assert again.body["machineToken"] != first.body["machineToken"]


@pytest.mark.parametrize("kind", ["p384", "ed25519", "rsa2048"])
def test_every_allowed_key_type_can_prove(make_token, machine_factory, kind: str) -> None:
    # Given a machine admitted with a key of each allowed kind
    token = make_token(maxUses=2)
    machine = machine_factory(kind)
    assert join(rejoin_body(token, machine)).status == 200
    # When it re-joins with a proof signed by that key, Then it is admitted
    again = join(rejoin_body(token, machine), signed_by=machine.key)
    assert again.status == 200, again.body


def test_a_captured_proof_is_worth_nothing_again(make_token, machine_factory) -> None:
    # Given a re-join the attacker captured whole (body and proof header)
    token, other = make_token(maxUses=5), make_token(maxUses=5)
    machine = machine_factory()
    first = join(rejoin_body(token, machine)).body
    raw, proof = signed(machine, token["token"], rejoin_body(token, machine))
    assert join(None, raw=raw, proof=proof).status == 200
    owner = machine_record(first["machineId"])
    # When it is replayed within the window: as it was, with another token, with another body
    as_is = join(None, raw=raw, proof=proof)
    other_token = join(None, raw=json.dumps(rejoin_body(other, machine)).encode(), proof=proof)
    bearer = join({"csr": machine.csr, "hostname": "gpu-01"}, bearer=other["token"], proof=proof)
    other_body = join(None, raw=raw.replace(b"gpu-01", b"gpu-02"), proof=proof)
    # Then the first is a replay, the others do not verify; none carries credentials
    assert (as_is.status, as_is.body["message"]) == (
        401,
        "this Joinplane-Proof is not newer than one already accepted for this key; sign a new one",
    )
    for reply in (other_token, bearer, other_body):
        assert (reply.status, reply.body["code"], reply.reason) == (401, 16, "PROOF_INVALID"), reply.body
        assert "does not verify" in reply.body["message"]
    # And after the window the same capture is refused for its age
    clock.advance(301)
    late = join(None, raw=raw, proof=proof)
    assert (late.status, late.body["code"], late.reason) == (
        401,
        16,
        "PROOF_STALE",
    ) and "too old" in late.body["message"]
    assert machine_record(first["machineId"]) == owner


def test_the_window_is_five_minutes_back_and_one_ahead(make_token, machine_factory, monkeypatch) -> None:
    token = make_token(maxUses=5)
    machine = machine_factory()
    # Given an admitted machine, When it re-joins with proofs dated around now, Then only those within
    # five minutes back and one minute ahead are accepted
    join(rejoin_body(token, machine))
    now = int(clock.epoch() * 1000)
    # The server's clock stands still meanwhile: the edges are a second wide, and a loaded machine
    # can take longer than that between two of these joins.
    monkeypatch.setattr(clock, "epoch", lambda: now / 1000)
    # (in order of t: each accepted proof must be newer than the last one accepted)
    for t, status in ((now - 301_000, 401), (now - 299_000, 200), (now + 59_000, 200), (now + 61_000, 401)):
        raw, proof = signed(machine, token["token"], rejoin_body(token, machine), timestamp_ms=t)
        assert join(None, raw=raw, proof=proof).status == status, t


@pytest.mark.parametrize("off_ms", [-301_000, 61_000])
def test_a_stale_refusal_says_the_server_time_in_ms(make_token, machine_factory, off_ms: int) -> None:
    # Given an admitted machine whose clock is outside the window, behind or ahead
    token = make_token(maxUses=5)
    machine = machine_factory()
    join(rejoin_body(token, machine))
    now = int(clock.epoch() * 1000)
    raw, proof = signed(machine, token["token"], rejoin_body(token, machine), timestamp_ms=now + off_ms)

    # When it re-joins
    refused = join(None, raw=raw, proof=proof)

    # Then the refusal carries the server's time, to the millisecond, for the client to sign again on
    (info,) = [d for d in refused.body["details"] if d["@type"].endswith("ErrorInfo")]
    assert (refused.status, info["reason"]) == (401, "PROOF_STALE")
    assert now <= int(info["metadata"]["serverTime"]) <= int(clock.epoch() * 1000)


def test_a_proof_made_with_another_key_does_not_verify(make_token, machine_factory) -> None:
    token = make_token(maxUses=5)
    # Given an admitted machine and a thief with a key of its own
    machine, thief = machine_factory(), machine_factory()
    join(rejoin_body(token, machine))
    # When the thief signs the machine's re-join, body and token right: Then it does not verify
    refused = join(rejoin_body(token, machine), signed_by=thief.key)
    assert (refused.status, refused.body["code"], refused.reason) == (401, 16, "PROOF_INVALID")
    # Naming the thief's key in the header does not help: the signer must be the identity
    raw, proof = signed(thief, token["token"], rejoin_body(token, machine), public_key=thief.key)
    named = join(None, raw=raw, proof=proof)
    assert (named.status, named.body["message"]) == (
        401,
        "the Joinplane-Proof must be signed with the machine's current key",
    )


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        "t=1",  # no signature
        "t=abc,sig=AAAA",
        "t=1764530000,sig=AAAA",  # seconds, not milliseconds
        "t=1,sig=not*base64",
        "t=1,sig=AAAA,sig=AAAA",
        "t=1,sig=AAAA,n=0123456789abcdef",  # a part this version does not know
        "t=1,sig=AAAA,key=AAAA",  # a key that is no SubjectPublicKeyInfo
        "t=1,sig=" + "A" * 5000,
    ],
)
def test_a_malformed_proof_is_a_clear_400_and_changes_nothing(
    make_token, machine_factory, header: str
) -> None:
    token = make_token(maxUses=5)
    machine = machine_factory()
    # Given an admitted machine
    join(rejoin_body(token, machine))
    before = all_items()
    # When it re-joins with a malformed proof header
    now = str(int(clock.epoch() * 1000))
    reply = join(rejoin_body(token, machine), proof=header.replace("t=1,", f"t={now},"))
    # Then it is a 400 naming the header, and nothing changed
    if header.endswith("key=AAAA"):
        assert (reply.status, reply.body["code"], reply.reason) == (400, 3, "PROOF_MALFORMED"), reply.body
    else:
        assert (reply.status, reply.body["code"], reply.reason) == (400, 3, "PROOF_MALFORMED"), reply.body
        assert "Joinplane-Proof" in reply.body["message"]
    assert all_items() == before


def test_a_proof_on_a_fingerprint_join_is_refused(make_token, machine_factory) -> None:
    # Given a fingerprint join (no CSR, so no key to prove), When it carries a proof, Then it is refused
    token = make_token()
    machine = machine_factory()
    raw, proof = signed(machine, token["token"], {"joinToken": token["token"], "machineFingerprint": "fp-1"})
    reply = join(None, raw=raw, proof=proof)
    assert (reply.status, reply.body["code"], reply.reason) == (
        400,
        3,
        "PROOF_MALFORMED",
    ) and "needs a csr" in reply.body["message"]


def test_concurrent_replays_of_one_proof_admit_exactly_one(make_token, machine_factory) -> None:
    # Given one valid re-join proof, sent 12 times at once
    token = make_token(maxUses=5)
    machine = machine_factory()
    join(rejoin_body(token, machine))
    raw, proof = signed(machine, token["token"], rejoin_body(token, machine))
    # When the 12 arrive together (the proof's mark is one conditional write; a read-then-write mark
    # would let several through: tests/harness/test_race_harness.py, mark-once)
    replies = release_together(lambda i: join(None, raw=raw, proof=proof), 12)
    # Then exactly one gets a machine token; every other is refused (a replay, or a lost race)
    admitted = [r for r in replies if r.status == 200]
    assert len(admitted) == 1, [(r.status, r.body.get("message")) for r in replies]
    assert all(r.status in (401, 409) for r in replies if r.status != 200)


# --- consuming an approval ---------------------------------------------------------------------


def approved_machine(make_token, machine_factory, admin_key) -> tuple[dict[str, Any], Any, str]:
    token = make_token(requireApproval=True, maxUses=3)
    machine = machine_factory()
    request_id = join(rejoin_body(token, machine)).body["joinRequest"]["requestId"]
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    return token, machine, request_id


def test_consuming_an_approval_needs_the_key(make_token, machine_factory, admin_key) -> None:
    # Given a machine whose deferred request was approved
    token, machine, request_id = approved_machine(make_token, machine_factory, admin_key)
    # When its captured first body is sent again, with any token of the pool: Then it is refused, and
    # the approval is not consumed
    for credential in (token, make_token(maxUses=1)):
        stolen = join(rejoin_body(credential, machine))
        assert (stolen.status, stolen.body["code"], stolen.reason) == (401, 16, "PROOF_REQUIRED")
    request = dynamo.get(f"JREQ#{request_id}", "JREQ")
    assert request is not None and request["state"] == "approved"
    # And the machine itself, proving its key, is admitted
    assert join(rejoin_body(token, machine), signed_by=machine.key).status == 200


def test_a_pending_retrys_proof_is_used_up_so_it_cannot_consume_the_approval_later(
    make_token, machine_factory, admin_key
) -> None:
    # Given a pending retry the attacker captured with its proof (the agent signs every call)
    token = make_token(requireApproval=True, maxUses=3)
    machine = machine_factory()
    request_id = join(rejoin_body(token, machine)).body["joinRequest"]["requestId"]
    raw, proof = signed(machine, token["token"], rejoin_body(token, machine))
    assert join(None, raw=raw, proof=proof).status == 202
    # When the operator approves and the attacker replays the captured retry within the window
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    replay = join(None, raw=raw, proof=proof)
    # Then the proof was used up by the pending answer: no credentials, the approval still open
    assert (replay.status, replay.body["code"], replay.reason) == (401, 16, "PROOF_REPLAYED"), replay.body
    request = dynamo.get(f"JREQ#{request_id}", "JREQ")
    assert request is not None and request["state"] == "approved"


def test_a_dry_run_says_a_rejoin_needs_a_proof(make_token, machine_factory) -> None:
    token = make_token(maxUses=5)
    machine = machine_factory()
    # Given an admitted machine
    join(rejoin_body(token, machine))
    # When it asks for a dry run of a re-join without a proof, Then the verdict is deny, naming the proof
    dry = join({**rejoin_body(token, machine), "dryRun": True})
    assert dry.body["verdict"] == "deny" and "proof" in dry.body["errMsg"]
    # And with a proof the verdict is admit
    proven = join({**rejoin_body(token, machine), "dryRun": True}, signed_by=machine.key)
    assert proven.body["verdict"] == "admit"


# --- renewals ----------------------------------------------------------------------------------


def test_a_captured_renewal_is_worth_nothing(make_token, machine_factory) -> None:
    token = make_token()
    # Given an admitted machine whose proven renewal was captured
    machine, thief = machine_factory(), machine_factory()
    admitted = join(rejoin_body(token, machine)).body
    renew_body = {"machineToken": admitted["machineToken"], "csr": machine.csr}
    raw = json.dumps(renew_body).encode()
    proof = sign_proof(machine.key, purpose="renew", credential=admitted["machineToken"], body=raw)
    assert join(None, raw=raw, proof=proof, path="/machines/renew").status == 200
    # When it is replayed as captured, or with the thief's CSR under the captured proof, or with no
    # proof: Then each is refused, for its own reason
    as_is = join(None, raw=raw, proof=proof, path="/machines/renew")
    swapped = join(
        {"machineToken": admitted["machineToken"], "csr": thief.csr}, proof=proof, path="/machines/renew"
    )
    bare = join({"machineToken": admitted["machineToken"], "csr": thief.csr}, path="/machines/renew")
    reasons = {"as_is": as_is.reason, "swapped": swapped.reason, "bare": bare.reason}
    assert reasons == {"as_is": "PROOF_REPLAYED", "swapped": "PROOF_INVALID", "bare": "PROOF_REQUIRED"}
    for reply in (as_is, swapped, bare):
        assert (reply.status, reply.body["code"]) == (401, 16), reply.body
    # And the thief's key cannot sign for the machine either
    own = join(
        {"machineToken": admitted["machineToken"], "csr": thief.csr},
        signed_by=thief.key,
        path="/machines/renew",
    )
    assert (own.status, own.body["code"], own.reason) == (401, 16, "PROOF_INVALID")
    assert machine_record(admitted["machineId"])["identity"] != ""


def test_a_renewal_that_rotates_the_key_is_signed_by_the_old_one(make_token, machine_factory) -> None:
    token = make_token()
    # Given an admitted machine renewing with a CSR for a new key
    old, new = machine_factory(), machine_factory()
    admitted = join(rejoin_body(token, old)).body
    body = {"machineToken": admitted["machineToken"], "csr": new.csr}
    raw = json.dumps(body).encode()
    # When it is signed by the new key: Then it is refused (the server knows only the old one)
    by_new = sign_proof(
        new.key, purpose="renew", credential=admitted["machineToken"], body=raw, public_key=new.key
    )
    assert join(None, raw=raw, proof=by_new, path="/machines/renew").status == 401
    # Signed by the old key alone: refused too (the CSR's own signature is no fresh possession)
    by_old = sign_proof(
        old.key, purpose="renew", credential=admitted["machineToken"], body=raw, public_key=old.key
    )
    alone = join(None, raw=raw, proof=by_old, path="/machines/renew")
    assert (alone.status, alone.body["code"], alone.reason) == (
        401,
        16,
        "PROOF_INVALID",
    ) and "csrsig" in alone.body["message"]
    # When it is signed by both: Then the identity moves to the new key
    by_both = sign_proof(
        old.key,
        purpose="renew",
        credential=admitted["machineToken"],
        body=raw,
        public_key=old.key,
        new_key=new.key,
    )
    renewed = join(None, raw=raw, proof=by_both, path="/machines/renew")
    assert renewed.status == 200, renewed.body
    # And the next renewal must be signed by the new key
    again = join(
        {"machineToken": admitted["machineToken"], "csr": new.csr}, signed_by=new.key, path="/machines/renew"
    )
    assert again.status == 200, again.body


def test_a_renewal_cannot_rotate_into_another_machines_key(make_token, machine_factory) -> None:
    # Given two machines, and the first one's renewal rotating into the second one's key, with
    # fresh proofs of both keys (whoever holds both)
    token = make_token(maxUses=2)
    first, second = machine_factory(), machine_factory()
    admitted = join(rejoin_body(token, first)).body
    assert join(rejoin_body(token, second)).status == 200
    raw = json.dumps({"machineToken": admitted["machineToken"], "csr": second.csr}).encode()
    proof = sign_proof(
        first.key,
        purpose="renew",
        credential=admitted["machineToken"],
        body=raw,
        public_key=first.key,
        new_key=second.key,
    )
    before = all_items()
    # When it renews
    refused = join(None, raw=raw, proof=proof, path="/machines/renew")
    # Then the key is in use by another machine identity, and nothing changed
    assert (refused.status, refused.body["code"], refused.reason) == (400, 9, "KEY_IN_USE"), refused.body
    assert all_items() == before


# --- fingerprint identities --------------------------------------------------------------------


def test_fingerprint_joins_still_work_for_levers9_clients(make_token) -> None:
    # Given a token, When a levers9 client joins twice by fingerprint (no CSR, no proof)
    token = make_token(maxUses=2)
    body = {"joinToken": token["token"], "machineFingerprint": "levers9-host-1"}
    first = join(body)
    again = join(body)  # a levers9 agent restarting: nothing to prove with, as before
    # Then both are admitted, as the same machine
    assert first.status == again.status == 200
    assert again.body["machineId"] == first.body["machineId"]


def test_a_token_can_require_key_bound_identities(make_token, machine_factory) -> None:
    # Given a token whose attestation requires a key
    token = make_token(maxUses=3, attestation={"identity": "key"})
    before = all_items()
    # When a machine joins with a fingerprint only, it is denied and nothing is written
    refused = join({"joinToken": token["token"], "machineFingerprint": "levers9-host-2"})
    assert (refused.status, refused.body["code"], refused.reason) == (403, 7, "JOIN_DENIED"), refused.body
    assert "key-bound" in refused.body["message"]
    assert all_items() == before
    # And a machine with a CSR is admitted
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 200


def test_the_identity_setting_is_validated(admin_key: str, pool: dict[str, Any]) -> None:
    # When a token is made with an identity setting that is not one, Then it is INVALID_ARGUMENT
    reply = call(
        "/api/compute/joinTokens/create",
        {"tenantId": "acme", "poolId": "gpu", "attestation": {"identity": "maybe"}},
        admin_key,
    )
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT")


# --- what review found (each failed on the first design) ---------------------------------------


def test_a_signed_request_that_failed_is_retired_by_the_machines_next_proof(
    make_token, machine_factory, admin_key
) -> None:
    # Given an approved machine whose signed retry was captured and ran out of time uncommitted
    token = make_token(requireApproval=True, maxUses=1)
    machine = machine_factory()
    request_id = join(rejoin_body(token, machine)).body["joinRequest"]["requestId"]
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    raw, captured = signed(machine, token["token"], rejoin_body(token, machine))
    failed = load_function("machine_join").lambda_handler(
        http_event("/machines/join", raw, {"joinplane-proof": captured}), LambdaContext(remaining_millis=200)
    )
    assert failed["statusCode"] == 503
    # When the machine retries with a newer proof and gets in, and the capture is replayed later
    admitted = join(None, raw=raw, proof=signed(machine, token["token"], rejoin_body(token, machine))[1])
    assert admitted.status == 200, admitted.body
    clock.advance(240)
    stolen = join(None, raw=raw, proof=captured)
    # Then the older proof is worth nothing, and the machine's token still works
    assert (stolen.status, stolen.body["code"], stolen.reason) == (401, 16, "PROOF_REPLAYED"), stolen.body
    renewed = join(
        {"machineToken": admitted.body["machineToken"], "csr": machine.csr},
        signed_by=machine.key,
        path="/machines/renew",
    )
    assert renewed.status == 200, renewed.body


def test_a_withheld_pending_retry_is_retired_by_a_later_poll(make_token, machine_factory, admin_key) -> None:
    # Given a signed poll a proxy captured and dropped, and the agent's next poll delivered
    token = make_token(requireApproval=True, maxUses=3)
    machine = machine_factory()
    request_id = join(rejoin_body(token, machine)).body["joinRequest"]["requestId"]
    raw, withheld = signed(machine, token["token"], rejoin_body(token, machine))
    assert join(rejoin_body(token, machine), signed_by=machine.key).status == 202
    # When the operator approves and the withheld poll is delivered
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    late = join(None, raw=raw, proof=withheld)
    # Then it gets nothing, and the approval is still the machine's
    assert (late.status, late.body["code"], late.reason) == (401, 16, "PROOF_REPLAYED"), late.body
    assert join(rejoin_body(token, machine), signed_by=machine.key).status == 200


def test_a_fingerprint_machine_cannot_renew_into_a_key(make_token, machine_factory) -> None:
    # Given a fingerprint-only machine whose join body was captured and replayed (a documented risk)
    token = make_token(maxUses=1)
    body = {"joinToken": token["token"], "machineFingerprint": "levers9-host-1"}
    victim = join(body)
    stolen = join(body)
    assert stolen.status == 200
    before = all_items()
    # When the attacker renews with its own key
    thief = machine_factory()
    renewed = join(
        {"machineToken": stolen.body["machineToken"], "csr": thief.csr},
        signed_by=thief.key,
        path="/machines/renew",
    )
    # Then there is no certificate and nothing moved: the real machine can still re-join as itself
    assert (renewed.status, renewed.body["code"], renewed.reason) == (400, 9, "MACHINE_HAS_NO_KEY"), (
        renewed.body
    )
    assert all_items() == before
    assert join(body).body["machineId"] == victim.body["machineId"]


def test_a_rotation_must_prove_the_new_key_too(make_token, machine_factory) -> None:
    # Given an attacker's own machine and a victim's CSR it captured (validly self-signed, not fresh)
    token = make_token(maxUses=2)
    attacker, victim = machine_factory(), machine_factory()
    mine = join(rejoin_body(token, attacker)).body
    raw = json.dumps({"machineToken": mine["machineToken"], "csr": victim.csr}).encode()
    proof = sign_proof(
        attacker.key, purpose="renew", credential=mine["machineToken"], body=raw, public_key=attacker.key
    )
    # When it renews "rotating" into the victim's key
    rotated = join(None, raw=raw, proof=proof, path="/machines/renew")
    # Then it is refused, and the victim's first join is an ordinary first join
    assert (rotated.status, rotated.body["code"], rotated.reason) == (401, 16, "PROOF_INVALID"), rotated.body
    assert join(rejoin_body(make_token(), victim)).status == 200


def test_another_pools_token_learns_nothing_of_a_revoked_or_replaced_key(
    admin_key, make_token, machine_factory, other_pool
) -> None:
    # Given a revoked machine, a machine whose key was replaced, and a live one
    token = make_token(maxUses=3)
    revoked, replaced, new, live = (machine_factory() for _ in range(4))
    gone = join(rejoin_body(token, revoked)).body
    moved = join(rejoin_body(token, replaced)).body
    join(rejoin_body(token, live))
    call("/api/compute/machines/revoke", {"tenantId": "acme", "machineId": gone["machineId"]}, admin_key)
    raw = json.dumps({"machineToken": moved["machineToken"], "csr": new.csr}).encode()
    rotation = sign_proof(
        replaced.key,
        purpose="renew",
        credential=moved["machineToken"],
        body=raw,
        public_key=replaced.key,
        new_key=new.key,
    )
    assert join(None, raw=raw, proof=rotation, path="/machines/renew").status == 200
    # When another pool's token presents each key
    replies = [join({"joinToken": other_pool, "csr": m.csr}) for m in (revoked, replaced, live)]
    # Then all three answers are the same
    assert len({(r.status, r.body["code"], r.body["message"]) for r in replies}) == 1, replies
