"""Credential activation in the join (docs/tpm.md): what a TPM join presents, its challenge, and
the check of its answer, and the join's branch that runs them (`challenge_or_activate`). Imported
only by a join whose `tpm` carries `ekPublic` and `akPublic`.

1. The join presents its EK and an AK (TPM2B_PUBLIC each) and no `activation`: the server checks
   the AK is this TPM's own restricted signing key, seals a fresh 32-byte secret to the EK and the
   AK's name (MakeCredential) and stores only the secret's SHA-256, bound to the join identity (the
   CSR's key), the token, the EK and the AK's name, for `CHALLENGE_SECONDS`. Answer: 202 with
   `tpmChallenge`; no token use is taken, nothing else is written.
2. The machine's TPM activates the credential: only the TPM holding the EK's private key, with an
   object of the AK's name loaded, recovers the secret.
3. The retry carries the secret, signed by the CSR's key (`Joinplane-Proof`, mandatory): the
   challenge is consumed by one conditional delete (single use: of concurrent retries with the
   same secret exactly one passes) before anything is decided. Only then is the EK "activated",
   and the `tpm` attestor votes on it. Any mismatch, whatever it is, is one refusal:
   TPM_ACTIVATION_FAILED.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from typing import TYPE_CHECKING, Any, NamedTuple

from joinplane import clock, errors, join_decide, join_wire, observe, tpm_credential, tpm_manufacturers
from joinplane.dal import machines as machines_db
from joinplane.dal import tpm_challenges as challenges_db
from joinplane.dal.tpm_challenges import ChallengeRecord
from joinplane.errors import InvalidArgument, Unauthenticated
from joinplane.tpm_manufacturers import EkCertificate

if TYPE_CHECKING:
    from joinplane import join_views
    from joinplane.dal.machines import IdentityRecord
    from joinplane.dal.tokens import JoinTokenRecord
    from joinplane.join_facts import Attempt
    from joinplane.join_wire import JoinMachineRequest

CHALLENGE_SECONDS = 300
ACTIVATION_FAILED = "the TPM credential activation failed; start the join again to get a new challenge"
PROOF_NEEDED = (
    "a TPM join (its challenge and its activation answer) must be signed by the csr's key: send a "
    "Joinplane-Proof header (see docs/join.md)"
)


class PresentedTpm(NamedTuple):
    """A TPM join's EK and AK, read and checked; the EK certificate if sent (its key is the EK's)."""

    ek: tpm_credential.Public
    ak: tpm_credential.Public
    ek_sha256: str
    certificate: Any  # cryptography's x509.Certificate, or None
    certificate_facts: EkCertificate | None


class Activated(NamedTuple):
    """A TPM that answered its challenge: its EK and AK, and its EK certificate (if sent)."""

    ek_sha256: str
    ak_name: str  # hex
    certificate: Any
    certificate_facts: EkCertificate | None


def _public(field: str, encoded: str) -> tpm_credential.Public:
    try:
        return tpm_credential.parse_public(base64.b64decode(encoded, validate=True))
    except (binascii.Error, tpm_credential.InvalidPublic) as invalid:
        reason = str(invalid) if isinstance(invalid, tpm_credential.InvalidPublic) else "is not base64"
        raise InvalidArgument(
            f"invalid value for {field}: {reason}", [{"field": field, "reason": reason}]
        ) from None


def presented(request: JoinMachineRequest, csr: Any) -> PresentedTpm:
    """The EK and AK of a join whose `tpm` has `ekPublic` or `akPublic` (join_facts asks), each
    checked: a 400 naming the field for a blob that is not a usable EK or AK, for an AK a TPM could
    export or use to decrypt, and for an `ekPublicKeySha256` or EK certificate of another key."""
    tpm = request.tpm
    if not (tpm.ekPublic and tpm.akPublic):
        raise InvalidArgument("tpm.ekPublic and tpm.akPublic are sent together")
    if csr is None:
        raise InvalidArgument("a TPM join needs a csr: the credential activation is bound to the csr's key")
    ek, ak = _public("tpm.ekPublic", tpm.ekPublic), _public("tpm.akPublic", tpm.akPublic)
    for field, public, check in (
        ("tpm.ekPublic", ek, tpm_credential.check_ek),
        ("tpm.akPublic", ak, tpm_credential.check_ak),
    ):
        try:
            check(public)
        except tpm_credential.InvalidPublic as invalid:
            raise InvalidArgument(
                f"invalid value for {field}: {invalid}", [{"field": field, "reason": str(invalid)}]
            ) from None
    spki = ek.spki_der()
    ek_sha256 = hashlib.sha256(spki).hexdigest()
    if tpm.ekPublicKeySha256 and tpm.ekPublicKeySha256 != ek_sha256:
        raise InvalidArgument("tpm.ekPublicKeySha256 is not the hash of tpm.ekPublic's key")
    certificate = facts = None
    if tpm.ekCertificatePem:
        certificate, facts = tpm_manufacturers.read_ek_certificate(tpm.ekCertificatePem, spki)
    return PresentedTpm(ek, ak, ek_sha256, certificate, facts)


def _expected(
    token: JoinTokenRecord, identity: str, tpm: PresentedTpm, secret_sha256: str, expires: int
) -> ChallengeRecord:
    return ChallengeRecord(
        tenant_id=token.tenant_id,
        identity=identity,
        token_id=token.token_id,
        secret_sha256=secret_sha256,
        ek_sha256=tpm.ek_sha256,
        ak_name=tpm.ak.name.hex(),
        expires_at_epoch=expires,
    )


def challenge(
    token: JoinTokenRecord, identity: str, tpm: PresentedTpm
) -> tuple[int, join_views.JoinMachineResponse]:
    """Step 1: a credential for this TPM to activate, its secret stored only as a digest (one
    PutItem, replacing any earlier challenge of this key)."""
    secret = os.urandom(32)
    sealed = tpm_credential.make_credential(tpm.ek, tpm.ak.name, secret)
    expires = clock.seconds(clock.now()) + CHALLENGE_SECONDS  # as the challenge stores it
    challenges_db.put(_expected(token, identity, tpm, hashlib.sha256(secret).hexdigest(), expires))
    return 202, join_wire.challenge_response(
        base64.b64encode(sealed.credential_blob).decode(),
        base64.b64encode(sealed.encrypted_secret).decode(),
        clock.rfc3339(expires),
    )


def activate(
    token: JoinTokenRecord, identity: str, tpm: PresentedTpm, secret: str, proof_ms: int | None
) -> Activated:
    """Step 3: the answer, checked and consumed (one conditional DeleteItem), or a 401."""
    if proof_ms is None:
        raise Unauthenticated(PROOF_NEEDED, reason=errors.PROOF_REQUIRED)
    try:
        recovered = base64.b64decode(secret, validate=True)
    except binascii.Error:
        recovered = b""
    digest = hashlib.sha256(recovered).hexdigest()
    expected = _expected(token, identity, tpm, digest, 0)
    consumed = challenges_db.consume(expected, clock.now()) if recovered else None
    # The store compared the digest; compared here again, in constant time, as every secret is.
    if consumed is None or not hmac.compare_digest(consumed.secret_sha256, digest):
        raise Unauthenticated(ACTIVATION_FAILED, reason=errors.TPM_ACTIVATION_FAILED)
    return Activated(tpm.ek_sha256, tpm.ak.name.hex(), tpm.certificate, tpm.certificate_facts)


def manufacturer(tenant_id: str, site_id: str, activated: Activated) -> EkCertificate | None:
    """The EK certificate's facts with the chain's verdict against the site's manufacturers (one
    Query); None when the TPM sent no certificate."""
    if activated.certificate is None or activated.certificate_facts is None:
        return None
    maker, problem = tpm_manufacturers.check(tenant_id, site_id, activated.certificate, clock.now())
    return activated.certificate_facts._replace(manufacturer=maker, problem=problem)


def challenge_or_activate(
    attempt: Attempt,
) -> Attempt | IdentityRecord | tuple[int, join_views.JoinMachineResponse]:
    """A join that presents a TPM (docs/tpm.md): its challenge, or the attempt with the TPM's
    activation checked and consumed. A poll of the key's pending join request through its token
    needs no new activation: the request recorded what the TPM proved, so the key's record comes
    back and its history decides (the attestors would count the unactivated TPM as none, and
    `tpm: require` would deny the poll of a request it deferred). A dry run never activates: it
    answers as for a TPM not proved. Nothing here runs for a join without a TPM."""
    request = attempt.request
    tpm = presented(request, attempt.csr)
    attempt = attempt._replace(ek_sha256=tpm.ek_sha256)
    if request.dryRun:
        return attempt
    if request.tpm.activation is not None:
        activated = activate(
            attempt.token, attempt.identity, tpm, request.tpm.activation.secret, attempt.proof_ms
        )
        observe.note(tpmActivated=True)
        return attempt._replace(tpm=activated)
    record = machines_db.get_identity(attempt.tenant, attempt.identity)
    if record is not None and record.request_id and not record.machine_id:
        return record if record.token_id == attempt.token.token_id else attempt
    if not attempt.token.usable_at(clock.now()):
        # A spent token challenges only the keys it already serves (their re-joins): no
        # challenge is stored for a join the token would refuse anyway.
        refusal = join_decide.spent_token(attempt.token, record)
        if refusal is not None:
            raise refusal.error
    if attempt.proof_ms is None:
        # A key has one live challenge, which a new one replaces: only its holder may ask, or anyone
        # with the (public) CSR and a token of the tenant could cancel the machine's activation.
        raise Unauthenticated(PROOF_NEEDED, reason=errors.PROOF_REQUIRED)
    observe.log("INFO", "join challenged to activate a TPM credential", outcome="challenged")
    return challenge(attempt.token, attempt.identity, tpm)
