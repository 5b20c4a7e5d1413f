"""What a join presents, read into facts before anything is decided (docs/join.md, steps 1 to 4): the
token, the join identity, the proof of possession, the EK, the hardware ids it will claim, and the
lookups the attestors vote on (what its preflight checks mean is join_decide's). Every refusal here
is made before any write, so it leaves no trace."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from joinplane import attestors, credentials, errors, observe, proof
from joinplane.dal import tokens as tokens_db
from joinplane.dal.machines import AwsFactsRecord, Claim, TpmFactsRecord
from joinplane.dal.tokens import JoinTokenRecord
from joinplane.errors import InvalidArgument, Unauthenticated
from joinplane.join_decide import FINGERPRINT_PREFIX, REFUSED, Presented
from joinplane.join_wire import JoinMachineRequest


class Attempt(NamedTuple):
    """One join call, read: its request, its token, the identity it joins as, its CSR (if any),
    the EK hash it claims, the `t` of the proof of possession it verified (None: no proof sent) and
    its TPM's activation (None: no TPM proved anything; then the claimed EK counts as none)."""

    request: JoinMachineRequest
    token: JoinTokenRecord
    identity: str
    csr: Any  # csr_checks.Csr | None; typed loosely so this module does not import cryptography
    ek_sha256: str
    proof_ms: int | None = None
    tpm: Any = None  # tpm_join.Activated | None; loosely typed: only TPM joins import tpm_join
    aws: Any = None  # aws_rules.Caller | None: who signed an AWS IAM join, as STS answered

    @property
    def tenant(self) -> str:
        return self.token.tenant_id

    @property
    def presented(self) -> Presented:
        return Presented(self.identity, self.proof_ms)


def token_secret(request: JoinMachineRequest, authorization: str) -> str:
    """The join token from the body or the Authorization header; both given must agree (a proxy
    or client that adds one must not silently lose to the other)."""
    from_header = credentials.bearer(authorization)
    if request.joinToken and from_header and request.joinToken != from_header:
        raise InvalidArgument("joinToken in the body and the Authorization bearer token differ; send one")
    return request.joinToken or from_header


def load_token(secret: str) -> JoinTokenRecord:
    """The token a secret names (one GetItem); unknown, forged and revoked tokens look alike."""
    parsed = credentials.parse(secret, tokens_db.SECRET_PREFIX)
    if parsed is None:
        raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
    token_id = f"{tokens_db.ID_PREFIX}_{parsed.ulid}"
    token = tokens_db.get(token_id)
    if token is None or not credentials.matches(parsed.secret, token.secret_sha256):
        # The id a caller claimed, never verified: for the log, under its own name.
        observe.note(presentedTokenId=token_id, credentialRefusal="unknown" if token is None else "mismatch")
        raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
    if token.state != "active":
        # A revoked token still in use is worth seeing: the caller holds the real secret.
        observe.note(tenantId=token.tenant_id, tokenId=token.token_id, credentialRefusal=token.state)
        raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
    return token


def verified_proof(header: str, purpose: str, credential: str, body: bytes, csr: Any) -> int | None:
    """The `t` of a Joinplane-Proof that verifies for this request and the CSR's key; None: no proof."""
    parsed = proof.parse(header)
    if parsed is None:
        return None
    if csr is None:
        raise InvalidArgument(
            "a Joinplane-Proof needs a csr: the proof is made with the csr's key",
            reason=errors.PROOF_MALFORMED,
        )
    return proof.verify(
        parsed,
        purpose=purpose,
        credential=credential,
        body=body,
        csr_key=csr.public_key,
        identity=csr.public_key_sha256,
    ).timestamp_ms


def ek_sha256(request: JoinMachineRequest) -> str:
    given = request.tpm.ekPublicKeySha256
    if request.tpm.ekPublic:
        # A TPM join: tpm_join compares the hash and the certificate with the EK itself (by the
        # key's bits, so an EK certified under id-RSAES-OAEP is the same key).
        return given
    if request.tpm.ekCertificatePem:
        from joinplane import tpm_allow

        computed = tpm_allow.ek_hash_from_certificate(request.tpm.ekCertificatePem)
        if given and given != computed:
            raise InvalidArgument("tpm.ekPublicKeySha256 does not match tpm.ekCertificatePem")
        return computed
    return given


def presents_tpm(request: JoinMachineRequest) -> bool:
    """Does this join ask for credential activation (docs/tpm.md)? Only then is tpm_join loaded."""
    tpm = request.tpm
    return bool(tpm.ekPublic or tpm.akPublic or tpm.activation is not None)


def identity_of(request: JoinMachineRequest, csr: Any) -> str:
    if csr is not None:
        return str(csr.public_key_sha256)
    if not request.machineFingerprint:
        raise InvalidArgument("csr or machineFingerprint is required to identify the machine")
    return FINGERPRINT_PREFIX + hashlib.sha256(request.machineFingerprint.encode()).hexdigest()


def hardware_claims(request: JoinMachineRequest) -> list[Claim]:
    """The serial and system UUID this machine will hold, unless they are placeholders."""
    from joinplane import hardware

    placeholders = {field for field, _ in _placeholders(request)}
    claims = []
    try:
        if request.hardware.serialNumber and "serialNumber" not in placeholders:
            claims.append(("serial", hardware.normalize_serial(request.hardware.serialNumber)))
        if request.hardware.systemUuid and "systemUuid" not in placeholders:
            claims.append(("uuid", hardware.normalize_uuid(request.hardware.systemUuid)))
    except ValueError as invalid:
        raise InvalidArgument(f"invalid value for hardware: {invalid}") from None
    return claims


def held_by_others(claims: tuple[Claim, ...]) -> tuple[tuple[str, str], ...]:
    """Claims another machine holds, as the attestors name the fields."""
    fields = {"serial": "serialNumber", "uuid": "systemUuid", "ek": "tpm.ekPublicKeySha256"}
    return tuple((fields[kind], value) for kind, value in claims)


def ek_claims(attempt: Attempt) -> list[Claim]:
    """An activated EK is held by one active machine at a time, as a serial number is: a second
    machine with the same EK is a clone of the first or the same TPM under a new key."""
    return [("ek", attempt.tpm.ek_sha256)] if attempt.tpm is not None else []


def tpm_facts(attempt: Attempt, facts: attestors.Facts) -> TpmFactsRecord:
    """What the machine and its join request keep of the TPM: the EK, whether it was activated, how
    it was trusted, its certificate's issuer and serial, the AK's name."""
    activated = attempt.tpm
    if activated is None:
        return TpmFactsRecord(attempt.ek_sha256)
    certificate = activated.certificate_facts
    verified_by = "allow-list" if facts.ek_listed else "manufacturer" if facts.ek_manufacturer else ""
    return TpmFactsRecord(
        ek_public_key_sha256=activated.ek_sha256,
        activated=True,
        verified_by=verified_by,
        manufacturer=facts.ek_manufacturer,
        ek_certificate_issuer=certificate.issuer if certificate else "",
        ek_certificate_serial=certificate.serial if certificate else "",
        ek_certificate_problem=facts.ek_certificate_problem,
        ak_name=activated.ak_name,
    )


def aws_facts(attempt: Attempt) -> AwsFactsRecord:
    """What the machine and its join request keep of the AWS caller (docs/aws.md)."""
    caller = attempt.aws
    if caller is None:
        return AwsFactsRecord()
    return AwsFactsRecord(caller.account, caller.arn, caller.user_id, caller.instance_id)


def _placeholders(request: JoinMachineRequest) -> list[tuple[str, str]]:
    from joinplane import hardware

    return hardware.placeholder_reasons(
        request.hardware.serialNumber or None,
        request.hardware.systemUuid or None,
        list(request.hardware.macAddresses),
    )


def attestor_facts(attempt: Attempt, site_id: str) -> attestors.Facts:
    """The lookups the attestors vote on, each made only when the token's policy asks for it."""
    request, policy = attempt.request, attempt.token.attestation
    known, entry = None, None
    if policy.discovery == "defer-unknown":
        from joinplane import discovery

        match = discovery.lookup(
            attempt.tenant,
            site_id,
            serial=request.hardware.serialNumber or None,
            system_uuid=request.hardware.systemUuid or None,
            macs=list(request.hardware.macAddresses),
            fingerprint=request.machineFingerprint or None,
        )
        known = match is not None
        entry = (match.entry_id, match.hostname, match.matched_by) if match is not None else None
    listed, maker, problem = None, "", ""
    activated = attempt.tpm
    if policy.tpm != "off" and activated is not None:
        from joinplane import tpm_allow, tpm_join

        listed = tpm_allow.is_listed(attempt.tenant, site_id, activated.ek_sha256)
        if not listed and policy.trusts_manufacturers:
            certificate = tpm_join.manufacturer(attempt.tenant, site_id, activated)
            maker, problem = (certificate.manufacturer, certificate.problem) if certificate else ("", "")
    return attestors.Facts(
        placeholders=tuple(_placeholders(request)),
        discovery_known=known,
        discovery_entry=entry,
        ek_sha256=activated.ek_sha256 if activated is not None else "",
        ek_claimed=activated is None and bool(attempt.ek_sha256),
        ek_listed=listed,
        ek_manufacturer=maker,
        ek_certificate_problem=problem,
        key_bound=attempt.csr is not None,
        aws_caller=attempt.aws,
    )


def votes(attempt: Attempt, facts: attestors.Facts) -> list[attestors.Vote]:
    return attestors.evaluate(attempt.token, facts)
