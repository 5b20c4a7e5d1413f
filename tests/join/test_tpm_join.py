"""Credential activation in the join (docs/tpm.md), with a software TPM (tests/support/tpm_blobs.py:
its ActivateCredential is written independently of the server's MakeCredential). The same flow on
swtpm through tpm2-tools is in tests/attestation/test_tpm_credential_swtpm.py."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest

from joinplane import clock, keyauth
from joinplane.dal import dynamo
from joinplane.dal.tokens import token_key
from joinplane.dal.tpm_challenges import key_of as challenge_key
from joinplane.join_requests import ApproveJoinRequest, approve
from tests.support import call, join, release_together, sign_proof
from tests.support.tpm_blobs import (
    AK_ATTRIBUTES,
    FIXED_TPM,
    SoftEk,
    SoftManufacturer,
    SoftTpm,
    join_with_tpm,
    soft_ek,
    with_answer,
)

SITE = {"tenantId": "acme", "siteId": "rack-1"}


def _reasons(reply: Any) -> list[str]:
    assert reply.status == 202 and reply.body["joinRequest"], reply.body
    request = dynamo.get(f"JREQ#{reply.body['joinRequest']['requestId']}", "JREQ")
    assert request is not None
    return [r["code"] for r in request["reasons"]]


def _allow(admin_key: str, tpm: SoftTpm) -> None:
    added = call("/api/compute/tpmAllowList/add", {**SITE, "ekPublicKeySha256": tpm.ek_sha256()}, admin_key)
    assert added.status == 200, added.body


def _machine_view(admin_key: str, machine_id: str) -> dict[str, Any]:
    got = call("/api/compute/machines/get", {"tenantId": "acme", "machineId": machine_id}, admin_key)
    assert got.status == 200, got.body
    return dict(got.body)


def test_a_tpm_join_is_challenged_first_and_takes_no_token_use(
    make_token, machine_factory, admin_key
) -> None:
    # Given a one-use token requiring a TPM, and a machine whose TPM's EK the site lists
    token, machine, tpm = make_token(attestation={"tpm": "require"}), machine_factory(), SoftTpm.make("rsa")
    _allow(admin_key, tpm)
    body = {"joinToken": token["token"], "csr": machine.csr}
    # When it joins presenting its EK and AK
    first = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    # Then it gets a credential to activate, in the join's answer shape, and no use was taken
    assert first.status == 202, first.body
    assert (first.body["ok"], first.body["joinRequest"], first.body["machineId"]) == (False, None, "")
    assert set(first.body["tpmChallenge"]) == {"credentialBlob", "encryptedSecret", "expiresAt"}
    assert dynamo.get(*token_key(token["tokenId"]))["usesRemaining"] == 1  # type: ignore[index]
    # And the secret is stored only as its digest
    stored = dynamo.get(*challenge_key("acme", _identity(machine.csr)))
    secret = tpm.answer(first.body["tpmChallenge"])
    assert stored is not None and secret not in str(stored) and len(stored["secretSha256"]) == 64
    # When it retries with the recovered secret, signed by its key
    admitted = join(with_answer(body, tpm, secret), signed_by=machine.key)
    # Then it is admitted, and the machine shows the TPM it proved and how it was trusted
    assert admitted.status == 200, admitted.body
    shown = _machine_view(admin_key, admitted.body["machineId"])["tpm"]
    assert shown["ekPublicKeySha256"] == tpm.ek_sha256()
    assert (shown["activated"], shown["verifiedBy"], len(shown["akName"])) == (True, "allow-list", 68)


def _identity(csr: str) -> str:
    from joinplane import csr_checks

    return str(csr_checks.parse_csr(csr).public_key_sha256)


def test_the_answer_is_single_use_and_needs_the_keys_proof(make_token, machine_factory) -> None:
    token, machine, tpm = make_token(maxUses=3), machine_factory(), SoftTpm.make()
    body = {"joinToken": token["token"], "csr": machine.csr}
    first = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    retry = with_answer(body, tpm, tpm.answer(first.body["tpmChallenge"]))
    # When the answer comes without a proof of possession, Then it is refused and not consumed
    unsigned = join(retry)
    assert (unsigned.status, unsigned.reason) == (401, "PROOF_REQUIRED")
    # When it comes signed, Then it is admitted; When it comes again (newly signed), Then refused
    assert join(retry, signed_by=machine.key).status == 200
    again = join(retry, signed_by=machine.key)
    assert (again.status, again.reason) == (401, "TPM_ACTIVATION_FAILED")


def test_an_answer_replayed_with_another_key_or_another_join_is_refused(make_token, machine_factory) -> None:
    # Given a machine whose TPM answered its challenge
    token, other_token = make_token(maxUses=3), make_token(maxUses=3)
    victim, attacker, tpm = machine_factory(), machine_factory(), SoftTpm.make()
    first = join(
        {"joinToken": token["token"], "csr": victim.csr, "tpm": tpm.presented()}, signed_by=victim.key
    )
    secret = tpm.answer(first.body["tpmChallenge"])
    # When the answer is sent with another key (the attacker's own CSR, signed by it)
    stolen = join(
        with_answer({"joinToken": token["token"], "csr": attacker.csr}, tpm, secret), signed_by=attacker.key
    )
    # Or by the same key through another token (another join)
    elsewhere = join(
        with_answer({"joinToken": other_token["token"], "csr": victim.csr}, tpm, secret), signed_by=victim.key
    )
    # Or for another AK of the same EK
    other_ak = SoftTpm(tpm.ek, SoftTpm.make().ak_blob)
    swapped = join(
        with_answer({"joinToken": token["token"], "csr": victim.csr}, other_ak, secret), signed_by=victim.key
    )
    # Then each is refused with the one reason, and the machine's own answer still works
    assert [(r.status, r.reason) for r in (stolen, elsewhere, swapped)] == [
        (401, "TPM_ACTIVATION_FAILED")
    ] * 3
    own = join(
        with_answer({"joinToken": token["token"], "csr": victim.csr}, tpm, secret), signed_by=victim.key
    )
    assert own.status == 200, own.body


def test_only_the_keys_holder_can_ask_for_its_challenge(make_token, machine_factory) -> None:
    # Given a machine whose TPM holds a live challenge
    token, other_token = make_token(maxUses=3), make_token(maxUses=3)
    victim, tpm = machine_factory(), SoftTpm.make()
    first = join(
        {"joinToken": token["token"], "csr": victim.csr, "tpm": tpm.presented()}, signed_by=victim.key
    )
    secret = tpm.answer(first.body["tpmChallenge"])
    # When someone with the victim's (public) CSR and a token of the tenant asks for a new challenge
    # for that key, without the key's proof
    cancel = join({"joinToken": other_token["token"], "csr": victim.csr, "tpm": tpm.presented()})
    # Then it is refused, and the victim's answer to its own challenge still admits it
    assert (cancel.status, cancel.reason) == (401, "PROOF_REQUIRED")
    own = join(
        with_answer({"joinToken": token["token"], "csr": victim.csr}, tpm, secret), signed_by=victim.key
    )
    assert own.status == 200, own.body


def test_a_wrong_or_expired_answer_is_refused(make_token, machine_factory) -> None:
    token, machine, tpm = make_token(maxUses=3), machine_factory(), SoftTpm.make()
    body = {"joinToken": token["token"], "csr": machine.csr}
    first = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    guessed = join(with_answer(body, tpm, base64.b64encode(os.urandom(32)).decode()), signed_by=machine.key)
    assert (guessed.status, guessed.reason) == (401, "TPM_ACTIVATION_FAILED")
    # Given a fresh challenge left past its expiry
    first = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    clock.advance(301)
    payload = json.dumps(with_answer(body, tpm, tpm.answer(first.body["tpmChallenge"]))).encode()
    now_ms = int(clock.epoch() * 1000)  # the machine's clock moved on too
    proof = sign_proof(
        machine.key, purpose="join", credential=token["token"], body=payload, timestamp_ms=now_ms
    )
    late = join(None, raw=payload, proof=proof)
    assert (late.status, late.reason) == (401, "TPM_ACTIVATION_FAILED")


def test_a_second_tpm_claiming_the_first_ones_ek_cannot_answer(make_token, machine_factory) -> None:
    # Given a TPM that presents another TPM's EK (public) with its own AK
    victim = SoftTpm.make("rsa")
    impostor = SoftTpm(SoftEk(soft_ek("rsa").private, victim.ek.blob), SoftTpm.make("rsa").ak_blob)
    token, machine = make_token(), machine_factory()
    first = join(
        {"joinToken": token["token"], "csr": machine.csr, "tpm": impostor.presented()}, signed_by=machine.key
    )
    # Then it cannot recover the secret: only the EK's private key decrypts the seed
    with pytest.raises(ValueError):
        impostor.answer(first.body["tpmChallenge"])


@pytest.mark.parametrize(
    ("attributes", "why"),
    [(AK_ATTRIBUTES & ~FIXED_TPM, "not fixedTPM")],
)
def test_an_ak_a_tpm_could_export_is_refused_before_any_challenge(
    make_token, machine_factory, attributes: int, why: str
) -> None:
    token, machine = make_token(), machine_factory()
    tpm = SoftTpm.make("ecc", attributes)
    reply = join({"joinToken": token["token"], "csr": machine.csr, "tpm": tpm.presented()})
    assert (reply.status, reply.reason) == (400, "VALIDATION_FAILED") and why in reply.body["message"]
    assert "tpm.akPublic" in reply.body["message"]
    assert dynamo.get(*challenge_key("acme", _identity(machine.csr))) is None


def _spoiled_ek(kind: str) -> bytes:
    """A well-formed EK blob whose key is not a key: an RSA modulus of zero, or an ECC point moved
    off the curve (its last byte flipped)."""
    blob = bytearray(soft_ek(kind).blob)
    if kind == "rsa":
        blob[-256:] = bytes(256)
    else:
        blob[-1] ^= 1
    return bytes(blob)


@pytest.mark.parametrize("kind", ["rsa", "ecc"])
def test_an_ek_blob_that_is_not_a_key_is_refused_before_any_challenge(
    make_token, machine_factory, kind: str
) -> None:
    # Given a join whose EK blob is well formed but holds no usable key
    token, machine = make_token(attestation={"tpm": "require"}), machine_factory()
    presented = {**SoftTpm.make(kind).presented(), "ekPublic": base64.b64encode(_spoiled_ek(kind)).decode()}
    # When it joins
    reply = join({"joinToken": token["token"], "csr": machine.csr, "tpm": presented})
    # Then it is a 400 naming the EK, not an internal error, and no challenge was stored
    assert (reply.status, reply.reason) == (400, "VALIDATION_FAILED"), reply.body
    assert "tpm.ekPublic" in reply.body["message"]
    assert dynamo.get(*challenge_key("acme", _identity(machine.csr))) is None


@pytest.mark.parametrize("policy", ["defer-unlisted", "require"])
@pytest.mark.parametrize("trust", ["allow-list", "manufacturer"])
def test_public_ek_material_without_the_tpm_is_never_admitted(
    make_token, machine_factory, admin_key, policy: str, trust: str
) -> None:
    # Given a site that lists a TPM's EK and its manufacturer, and a token of each setting
    maker, victim = SoftManufacturer.make(), SoftTpm.make("rsa")
    _allow(admin_key, victim)
    listed = call(
        "/api/compute/tpmAllowList/manufacturers/add", {**SITE, "certificatePem": maker.root_pem}, admin_key
    )
    assert listed.status == 200, listed.body
    certificate = maker.ek_certificate(victim.ek)
    token = make_token(attestation={"tpm": policy, "tpmTrust": trust}, maxUses=10)
    # When an attacker holding only the EK's public material joins with a fresh key, every way
    claims = [
        {"ekPublicKeySha256": victim.ek_sha256()},
        {"ekCertificatePem": certificate},
        {"ekPublicKeySha256": victim.ek_sha256(), "ekCertificatePem": certificate},
    ]
    for claim in claims:
        reply = join({"joinToken": token["token"], "csr": machine_factory().csr, "tpm": claim})
        # Then it is never admitted: the EK counts as no TPM
        assert reply.status in (202, 403), reply.body
        if reply.status == 202:
            assert _reasons(reply) == ["tpm_not_activated"]
    # And with the EK and AK's public parts it gets a challenge it cannot answer
    attacker = machine_factory()
    body = {"joinToken": token["token"], "csr": attacker.csr, "tpm": {"ekCertificatePem": certificate}}
    first = join({**body, "tpm": {**body["tpm"], **victim.presented()}}, signed_by=attacker.key)
    assert first.status == 202 and first.body["tpmChallenge"]
    forged = join(
        with_answer(body, victim, base64.b64encode(os.urandom(32)).decode()), signed_by=attacker.key
    )
    assert (forged.status, forged.reason) == (401, "TPM_ACTIVATION_FAILED")


def test_a_listed_manufacturer_admits_and_an_unlisted_one_defers(
    make_token, machine_factory, admin_key
) -> None:
    # Given a site listing one manufacturer's root and intermediate, and a token trusting manufacturers
    listed_maker, other_maker = SoftManufacturer.make("Acme TPM"), SoftManufacturer.make("Other TPM")
    for pem in (listed_maker.root_pem, listed_maker.intermediate_pem):
        added = call(
            "/api/compute/tpmAllowList/manufacturers/add", {**SITE, "certificatePem": pem}, admin_key
        )
        assert added.status == 200, added.body
    token = make_token(attestation={"tpm": "require", "tpmTrust": "manufacturer"}, maxUses=5)
    # When a TPM certified by the listed manufacturer proves its EK, Then it is admitted
    good, machine = SoftTpm.make("rsa"), machine_factory()
    body = {
        "joinToken": token["token"],
        "csr": machine.csr,
        "tpm": {"ekCertificatePem": listed_maker.ek_certificate(good.ek)},
    }
    _, admitted = join_with_tpm(body, machine.key, good)
    assert admitted.status == 200, admitted.body
    shown = _machine_view(admin_key, admitted.body["machineId"])["tpm"]
    assert (shown["verifiedBy"], shown["manufacturer"]) == ("manufacturer", "CN=Acme TPM Root CA")
    assert shown["ekCertificateIssuer"] == "CN=Acme TPM EK CA" and shown["ekCertificateSerial"]
    # When one certified by an unlisted manufacturer, or with an expired certificate, proves its EK
    for certify in (other_maker.ek_certificate, lambda ek: listed_maker.ek_certificate(ek, expired=True)):
        tpm, machine = SoftTpm.make("ecc"), machine_factory()
        body = {"joinToken": token["token"], "csr": machine.csr, "tpm": {"ekCertificatePem": certify(tpm.ek)}}
        _, deferred = join_with_tpm(body, machine.key, tpm)
        # Then it is deferred, and its request says why the certificate did not verify
        assert _reasons(deferred) == ["tpm_unlisted"]
        request = dynamo.get(f"JREQ#{deferred.body['joinRequest']['requestId']}", "JREQ")
        assert request is not None and request["machine"]["tpm"]["activated"] is True
        assert request["machine"]["tpm"]["ekCertificateProblem"]


def test_an_ek_certificate_of_another_key_is_refused(make_token, machine_factory) -> None:
    maker, tpm, machine = SoftManufacturer.make(), SoftTpm.make("rsa"), machine_factory()
    token = make_token()
    tpm_fields = {**tpm.presented(), "ekCertificatePem": maker.ek_certificate(soft_ek("rsa"))}
    reply = join({"joinToken": token["token"], "csr": machine.csr, "tpm": tpm_fields})
    assert (reply.status, reply.reason) == (400, "VALIDATION_FAILED") and "another key" in reply.body[
        "message"
    ]


def test_one_ek_is_one_active_machine(make_token, machine_factory, admin_key) -> None:
    # Given a machine admitted with an activated TPM
    token, tpm = make_token(attestation={"tpm": "defer-unlisted"}, maxUses=5), SoftTpm.make()
    _allow(admin_key, tpm)
    first = machine_factory()
    assert join_with_tpm({"joinToken": token["token"], "csr": first.csr}, first.key, tpm)[1].status == 200
    # When another machine (another key) proves the same TPM, Then it is deferred as duplicate hardware
    second = machine_factory()
    _, clone = join_with_tpm({"joinToken": token["token"], "csr": second.csr}, second.key, tpm)
    assert _reasons(clone) == ["duplicate_hardware_id"]


def test_a_deferred_tpm_join_polls_without_activating_again_and_keeps_its_proof(
    make_token, machine_factory, admin_key
) -> None:
    # Given a TPM join deferred for approval
    token, machine, tpm = make_token(requireApproval=True), machine_factory(), SoftTpm.make()
    body = {"joinToken": token["token"], "csr": machine.csr}
    _, deferred = join_with_tpm(body, machine.key, tpm)
    request_id = deferred.body["joinRequest"]["requestId"]
    # When it polls with its TPM's fields and no activation, Then it is still pending, not challenged
    poll = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    assert poll.status == 202 and poll.body["joinRequest"]["requestId"] == request_id
    assert "tpmChallenge" not in poll.body
    # When an operator approves and it polls again, Then the machine keeps what the TPM proved
    shown = call("/api/compute/joinRequests/get", {"tenantId": "acme", "requestId": request_id}, admin_key)
    assert shown.body["machine"]["tpm"]["activated"] is True, shown.body
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    admitted = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    assert admitted.status == 200, admitted.body
    assert _machine_view(admin_key, admitted.body["machineId"])["tpm"]["activated"] is True


def test_a_tpm_join_a_requiring_token_deferred_is_admitted_once_approved(
    make_token, machine_factory, admin_key
) -> None:
    # Given a TPM join through a token requiring a TPM (with uses left: a spent token sends its
    # retries straight to the key's history), deferred: its activated EK is on no list
    token = make_token(attestation={"tpm": "require"}, maxUses=5)
    machine, tpm = machine_factory(), SoftTpm.make()
    body = {"joinToken": token["token"], "csr": machine.csr}
    _, deferred = join_with_tpm(body, machine.key, tpm)
    assert deferred.status == 202, deferred.body
    request_id = deferred.body["joinRequest"]["requestId"]
    # When it polls with its TPM's fields and no activation, Then it is still pending, not denied
    poll = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    assert poll.status == 202 and poll.body["joinRequest"]["requestId"] == request_id, poll.body
    # When an operator approves and it polls again, Then it is admitted with what its TPM proved
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    admitted = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    assert admitted.status == 200, admitted.body
    assert _machine_view(admin_key, admitted.body["machineId"])["tpm"]["activated"] is True


def test_a_token_can_require_the_same_tpm_again_on_rejoin(make_token, machine_factory, admin_key) -> None:
    # Given a machine admitted with an activated TPM through a token requiring it again on re-join
    token = make_token(attestation={"tpm": "defer-unlisted", "tpmRejoin": "activate"}, maxUses=3)
    machine, tpm = machine_factory(), SoftTpm.make()
    _allow(admin_key, tpm)
    body = {"joinToken": token["token"], "csr": machine.csr}
    assert join_with_tpm(body, machine.key, tpm)[1].status == 200
    # When it re-joins without its TPM, Then it must activate again
    bare = join(body, signed_by=machine.key)
    assert (bare.status, bare.reason) == (401, "TPM_ACTIVATION_REQUIRED")
    # When it re-joins proving another TPM, Then it is denied
    other = SoftTpm.make()
    _allow(admin_key, other)
    assert join_with_tpm(body, machine.key, other)[1].reason == "JOIN_DENIED"
    # When it re-joins proving its TPM, Then it is admitted again
    again = join_with_tpm(body, machine.key, tpm)[1]
    assert again.status == 200, again.body


def test_two_retries_with_one_secret_released_together_admit_exactly_one(make_token, machine_factory) -> None:
    # A read-then-delete of the challenge lets several through under the same release: the
    # harness's consume-once (tests/harness/test_race_harness.py).
    # Given a challenge answered once
    token, machine, tpm = make_token(maxUses=5), machine_factory(), SoftTpm.make()
    body = {"joinToken": token["token"], "csr": machine.csr}
    first = join({**body, "tpm": tpm.presented()}, signed_by=machine.key)
    retry = with_answer(body, tpm, tpm.answer(first.body["tpmChallenge"]))
    # When eight retries carrying that answer (each with its own fresh proof) arrive at once
    replies = release_together(lambda _: join(retry, signed_by=machine.key), 8)
    # Then exactly one consumed the challenge and was admitted
    assert (
        sorted((r.status, r.reason) for r in replies) == [(200, None)] + [(401, "TPM_ACTIVATION_FAILED")] * 7
    )


def test_a_spent_token_challenges_only_the_keys_it_serves(make_token, machine_factory, admin_key) -> None:
    # Given a one-use token spent by a TPM machine's join
    token, machine, tpm = make_token(), machine_factory(), SoftTpm.make()
    body = {"joinToken": token["token"], "csr": machine.csr}
    assert join_with_tpm(body, machine.key, tpm)[1].status == 200
    # When a new key presents a TPM through it, Then it is refused before any challenge is stored
    stranger = machine_factory()
    refused = join({"joinToken": token["token"], "csr": stranger.csr, "tpm": SoftTpm.make().presented()})
    assert (refused.status, refused.reason) == (401, "JOIN_TOKEN_INVALID")
    assert dynamodb_challenge(stranger.csr) is None
    # When the machine it admitted re-joins with its TPM, Then it is challenged and re-joins
    assert join_with_tpm(body, machine.key, tpm)[1].status == 200


def dynamodb_challenge(csr: str) -> dict | None:
    return dynamo.get(*challenge_key("acme", _identity(csr)))
