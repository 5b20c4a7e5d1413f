"""A pool CA's key in KMS: created, read, signed with, and handed over for deletion.

Each pool's CA key is an asymmetric KMS key (ECC_NIST_P256, SIGN_VERIFY) that never leaves KMS,
aliased by its caId and tagged with the stack, tenant and pool. Everything is signed with `kms:Sign`
(`kms_sign_tbs`): cryptography builds the to-be-signed structure (signing it with a throwaway key of
the same algorithm, whose signature is discarded), KMS signs those bytes, and joinplane.der wraps
them; the result is verified against the CA's public key before it is handed out, so a wrong
assembly fails loudly instead of shipping. The functions never delete a key: one no CA will use is
recorded for the retention job (`schedule_key_deletion`).

Certificate code: it imports `cryptography` at module level, and is imported only by the
certificate code and inside the functions that sign.
"""

from __future__ import annotations

import hashlib

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from joinplane import aws, clock, der
from joinplane.dal import ca_retention
from joinplane.errors import Internal, RetryLater
from joinplane.settings import SIGNING_MODES, settings

# Real KMS signs RAW messages of at most 4096 bytes.
MAX_TBS_BYTES = 4096


def throwaway_key() -> ec.EllipticCurvePrivateKey:
    """A P-256 key whose only use is to make cryptography emit a TBS with ecdsa-with-SHA256 as its
    algorithm; its signatures are thrown away. One per container (made on first use)."""
    if not _throwaway:
        _throwaway.append(ec.generate_private_key(ec.SECP256R1()))
    return _throwaway[0]


_throwaway: list[ec.EllipticCurvePrivateKey] = []


def kms_sign_tbs(key_id: str, tbs: bytes) -> bytes:
    """The DER ECDSA-SHA256 signature of `tbs` by the KMS key: one kms:Sign. For any TBS (a
    certificate's, a CRL's `tbs_certlist_bytes`, a CSR's `tbs_certrequest_bytes`); wrap it with
    `der.signed(tbs, der.ECDSA_WITH_SHA256, signature)`. KMS signs RAW messages of at most 4096
    bytes; a larger TBS (a CRL of a hundred or more entries) is sent as its SHA-256 digest, which
    ECDSA_SHA_256 signs exactly as it would have hashed the message."""
    if len(tbs) > MAX_TBS_BYTES:
        message, message_type = hashlib.sha256(tbs).digest(), "DIGEST"
    else:
        message, message_type = tbs, "RAW"
    try:
        response = aws.client("kms").sign(
            KeyId=key_id, Message=message, MessageType=message_type, SigningAlgorithm="ECDSA_SHA_256"
        )
    except Exception as failure:
        _raise_if_unavailable(failure)
        raise
    return bytes(response["Signature"])


def sign_certificate(
    builder: x509.CertificateBuilder, key_id: str, public_key: ec.EllipticCurvePublicKey
) -> x509.Certificate:
    """`builder`'s certificate signed by the KMS key `key_id` whose public key is `public_key`,
    checked against that key before it is returned."""
    draft = builder.sign(throwaway_key(), hashes.SHA256())
    tbs = draft.tbs_certificate_bytes
    signed = der.signed(tbs, der.ECDSA_WITH_SHA256, kms_sign_tbs(key_id, tbs))
    try:
        certificate = x509.load_der_x509_certificate(signed)
        public_key.verify(certificate.signature, tbs, ec.ECDSA(hashes.SHA256()))
    except (ValueError, InvalidSignature) as failure:
        raise Internal(f"the certificate KMS key {key_id} signed does not verify") from failure
    return certificate


def intermediate_mode() -> bool:
    """Whether machine certificates are signed by a per-container intermediate (SIGNING_MODE
    `intermediate`) rather than one by one in KMS (`kms`). INTERNAL for anything else: the
    template's AllowedValues stop it at deploy time, and a hand-edited environment fails issuance
    rather than every function."""
    mode = settings().signing_mode
    if mode not in SIGNING_MODES:
        raise Internal(
            f"the deployment's SIGNING_MODE is {mode!r}: it must be one of {', '.join(SIGNING_MODES)}"
        )
    return mode == "intermediate"


def create_key(ca_id: str, tenant_id: str, pool_id: str) -> str:
    """A new P-256 signing key, tagged with the stack (what IAM lets functions sign with), tenant and
    pool, and aliased by the caId (tenant and pool ids may hold characters an alias refuses)."""
    config = settings()
    client = aws.client("kms")
    try:
        metadata = client.create_key(
            KeySpec="ECC_NIST_P256",
            KeyUsage="SIGN_VERIFY",
            Description=f"Joinplane CA {ca_id} of pool {tenant_id}/{pool_id}",
            Tags=[
                {"TagKey": "joinplane:stack", "TagValue": config.kms_stack_tag},
                {"TagKey": "joinplane:tenant", "TagValue": tenant_id},
                {"TagKey": "joinplane:pool", "TagValue": pool_id},
                {"TagKey": "joinplane:ca", "TagValue": ca_id},
            ],
        )["KeyMetadata"]
    except Exception as failure:
        _raise_if_unavailable(failure)
        raise
    try:
        client.create_alias(AliasName=f"{config.kms_alias_prefix}/{ca_id}", TargetKeyId=metadata["KeyId"])
    except Exception as failure:
        # The key exists and no CA will hold it: a caller told to retry would leave one behind
        # ($1 a month) at every attempt.
        schedule_key_deletion(str(metadata["KeyId"]))
        _raise_if_unavailable(failure)
        raise
    # The key id, not the ARN: every call takes either, and moto's ScheduleKeyDeletion only the id.
    return str(metadata["KeyId"])


def kms_public_key(key_id: str) -> ec.EllipticCurvePublicKey:
    """The KMS key's public key (one kms:GetPublicKey), which must be P-256."""
    try:
        response = aws.client("kms").get_public_key(KeyId=key_id)
    except Exception as failure:
        _raise_if_unavailable(failure)
        raise
    key = serialization.load_der_public_key(bytes(response["PublicKey"]))
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise Internal(f"KMS key {key_id} is not a P-256 key")
    return key


def schedule_key_deletion(key_id: str) -> None:
    """Hand a key no CA will use to the retention job, which schedules its deletion once it has
    checked that no CA uses it: these functions answer without an API key (joins, CRLs) and hold no
    kms:ScheduleKeyDeletion (docs/pki.md). Best effort: a key that is never used costs $1 a month
    until deleted; a failure here must not hide the caller's own outcome."""
    try:
        ca_retention.abandon_key(key_id, at=clock.now())
    except Exception as failure:
        from joinplane import observe

        observe.log(
            "WARNING",
            "an unused KMS key could not be handed to the retention job",
            keyId=key_id,
            error=type(failure).__name__,
        )


_UNAVAILABLE_CODES = frozenset(
    {
        "InternalServiceError",
        "KMSInternalException",
        "DependencyTimeoutException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
    }
)
# Not among them: KMS's LimitExceededException is a quota on resources (keys, aliases), which a
# retry a second later does not lift; told "retry in 1 s", every caller would retry for ever.


# What a caller is told to wait (Retry-After) when KMS throttled or failed after the client's own
# retries: its quotas are counted per second, so the next second has room again, and callers add
# their own jitter (docs/fleet.md).
KMS_RETRY_AFTER_SECONDS = 1


def _raise_if_unavailable(failure: Exception) -> None:
    # botocore is loaded already by the client that raised; importing it here costs nothing.
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    if isinstance(failure, ConnectionError | HTTPClientError):
        raise RetryLater(
            "the key store (KMS) is unavailable, retry later", KMS_RETRY_AFTER_SECONDS
        ) from failure
    if isinstance(failure, ClientError):
        status = failure.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = failure.response.get("Error", {}).get("Code")
        if code in _UNAVAILABLE_CODES or status == 429 or status >= 500:
            raise RetryLater(
                "the key store (KMS) is busy or unavailable, retry later", KMS_RETRY_AFTER_SECONDS
            ) from failure
