"""Proof of fresh possession of a machine's key (the `Joinplane-Proof` header).

Why: a CSR is neither fresh nor secret (it travels in every join), so a CSR alone must never be
worth credentials for an identity that already exists. A re-join, the join that consumes an
approval, and a renewal therefore carry a signature, made with the identity's private key within
the last few minutes, over exactly this request:

    joinplane-proof-v1\\n<purpose>\\n<t>\\n<sha256 hex of the credential>\\n<sha256 hex of the body>\\n

`purpose` is `join` or `renew`; `t` is Unix time in milliseconds; the credential is the join token
(join) or the machine token (renew) as sent; the body is the request body's bytes as sent. The
token names the pool, so the proof is bound to token, pool and body: replayed with another token
or another body it does not verify.

"Accepted once" is a high-water mark on the identity record (`proofAt`): a proof is accepted only
if its `t` is newer than every proof accepted for that key before, checked and moved by the same
conditional write that acts on it. Why not a cache of used proofs: a signed request that never
committed (dropped by a proxy, out of time, a lost race) would stay usable for the whole window
while the machine, retrying with a newer proof, got in; with the mark, the machine's next accepted
proof retires every older one, delivered or not. It also keys on the identity, not on signature
bytes, so ECDSA's malleable signatures (`s` and `n - s`) give a replayer nothing.

Why a signed timestamp and not a server nonce: a nonce needs its own round trip and a stored
challenge (a write before every such join); the timestamp costs nothing until it is used, and the
mark rides in the transaction the join makes anyway.

Header: `Joinplane-Proof: t=<unix ms>,sig=<base64>[,key=<base64 DER SPKI>][,csrsig=<base64>]`.
`key` names the signer when it is not the CSR's key (a renewal that rotates the key signs with the
current one); `csrsig` is then the new key's signature over the same bytes, so a rotation proves
fresh possession of both keys (the CSR's own signature is not fresh: anyone holding a copy of the
CSR could rotate another machine into it). Signatures: ECDSA with SHA-256 (DER, what `openssl dgst
-sha256 -sign` makes), RSA PKCS#1 v1.5 with SHA-256, or Ed25519 over the bytes themselves.

`cryptography` is imported inside the functions only: the proof costs nothing at cold start.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from joinplane import clock
from joinplane.errors import (
    PROOF_INVALID,
    PROOF_MALFORMED,
    PROOF_STALE,
    InvalidArgument,
    Unauthenticated,
)

HEADER = "joinplane-proof"
VERSION = "joinplane-proof-v1"
# How old a proof may be, and how far ahead of ours a machine's clock may run (milliseconds).
WINDOW_MS = 300_000
FUTURE_SKEW_MS = 60_000
MAX_HEADER_CHARS = 4096

STALE = "the Joinplane-Proof is too old or from the future (check the machine's clock)"
BAD = "the Joinplane-Proof signature does not verify for this request and key"
ROTATION = "a renewal that changes the key needs csrsig=, the new key's signature over the same proof"

_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


@dataclass(frozen=True)
class Proof:
    timestamp_ms: int
    signature: bytes
    key_der: bytes | None
    csr_signature: bytes | None


@dataclass(frozen=True)
class VerifiedProof:
    """A proof that verified. It is accepted by the join's write that moves the identity's mark to
    `t` on the condition that the mark is older (joinplane.dal.joins holds the condition)."""

    timestamp_ms: int


def _b64(value: str, name: str) -> bytes:
    if not _B64.fullmatch(value):
        raise InvalidArgument(f"Joinplane-Proof {name} is not base64", reason=PROOF_MALFORMED)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(f"Joinplane-Proof {name} is not base64", reason=PROOF_MALFORMED) from None


def parse(header: str) -> Proof | None:
    """The header's parts; None when there is no header. Malformed headers are INVALID_ARGUMENT."""
    if not header:
        return None
    if len(header) > MAX_HEADER_CHARS:
        raise InvalidArgument(
            f"Joinplane-Proof is longer than {MAX_HEADER_CHARS} characters", reason=PROOF_MALFORMED
        )
    parts: dict[str, str] = {}
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or name not in ("t", "sig", "key", "csrsig"):
            raise InvalidArgument(
                "Joinplane-Proof must be t=<unix ms>,sig=<base64>[,key=<base64>][,csrsig=<base64>]",
                reason=PROOF_MALFORMED,
            )
        if name in parts:
            raise InvalidArgument(f"Joinplane-Proof gives {name} twice", reason=PROOF_MALFORMED)
        parts[name] = value.strip()
    if not {"t", "sig"} <= parts.keys():
        raise InvalidArgument("Joinplane-Proof needs t= and sig=", reason=PROOF_MALFORMED)
    if not re.fullmatch(r"[0-9]{13}", parts["t"]):
        raise InvalidArgument(
            "Joinplane-Proof t must be Unix time in milliseconds (13 digits)", reason=PROOF_MALFORMED
        )
    return Proof(
        timestamp_ms=int(parts["t"]),
        signature=_b64(parts["sig"], "sig"),
        key_der=_b64(parts["key"], "key") if "key" in parts else None,
        csr_signature=_b64(parts["csrsig"], "csrsig") if "csrsig" in parts else None,
    )


def message(purpose: str, timestamp_ms: int, credential: str, body: bytes) -> bytes:
    """The signed bytes; clients build exactly this (README has it as a printf)."""
    return (
        f"{VERSION}\n{purpose}\n{timestamp_ms}\n"
        f"{hashlib.sha256(credential.encode()).hexdigest()}\n{hashlib.sha256(body).hexdigest()}\n"
    ).encode()


def _spki_sha256(key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    spki = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(spki).hexdigest()


def _verifies(key: Any, signature: bytes, signed: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, signed, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, signed)
        else:
            return False
    except (InvalidSignature, ValueError):
        return False
    return True


def verify(
    proof: Proof, *, purpose: str, credential: str, body: bytes, csr_key: Any, identity: str
) -> VerifiedProof:
    """Check `proof` was made within the window by the key whose SPKI hashes to `identity`.

    The signer is the CSR's key unless the header names another (`key=`); when the CSR's key is not
    the signer (a key rotation), `csrsig=` must prove fresh possession of the CSR's key too."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    now_ms = int(clock.epoch() * 1000)
    if not now_ms - WINDOW_MS <= proof.timestamp_ms <= now_ms + FUTURE_SKEW_MS:
        # Our time, to the millisecond, so a client can sign again on our clock at once (as AWS
        # SDKs correct a skewed signature); HTTP's Date alone has whole seconds.
        raise Unauthenticated(STALE, reason=PROOF_STALE, metadata={"serverTime": str(now_ms)})
    signer = csr_key
    if proof.key_der is not None:
        try:
            signer = serialization.load_der_public_key(proof.key_der)
        except (ValueError, UnsupportedAlgorithm):
            raise InvalidArgument(
                "Joinplane-Proof key is not a DER SubjectPublicKeyInfo", reason=PROOF_MALFORMED
            ) from None
    if _spki_sha256(signer) != identity:
        raise Unauthenticated(
            "the Joinplane-Proof must be signed with the machine's current key", reason=PROOF_INVALID
        )
    signed = message(purpose, proof.timestamp_ms, credential, body)
    if not _verifies(signer, proof.signature, signed):
        raise Unauthenticated(BAD, reason=PROOF_INVALID)
    if _spki_sha256(csr_key) != identity:
        if proof.csr_signature is None:
            raise Unauthenticated(ROTATION, reason=PROOF_INVALID)
        if not _verifies(csr_key, proof.csr_signature, signed):
            raise Unauthenticated(BAD, reason=PROOF_INVALID)
    return VerifiedProof(timestamp_ms=proof.timestamp_ms)
