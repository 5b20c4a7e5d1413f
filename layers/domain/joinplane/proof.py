"""Proof of fresh possession of a machine's key (the `Joinplane-Proof` header).

Why: a CSR is neither fresh nor secret (it travels in every join and the agent keeps it world-
readable), so a CSR alone must never be worth credentials for an identity that already exists. A
re-join, the join that consumes an approval, and a renewal therefore carry a signature, made with
the identity's private key within the last few minutes, over exactly this request:

    joinplane-proof-v1\\n<purpose>\\n<t>\\n<n>\\n<sha256 hex of the credential>\\n<sha256 hex of the body>\\n

`purpose` is `join` or `renew`; `t` is Unix seconds; `n` is a random nonce of the client's (16 to
64 of `[A-Za-z0-9_-]`: two proofs of one request in the same second must differ, or the second
would read as a replay; Ed25519 and RSA signatures are deterministic); the credential is the join
token (join) or the machine token (renew) as sent; the body is the request body's bytes as sent.
The token names the pool, so the proof is bound to token, pool and body: replayed with another
token or another body it does not verify.

Why a signed timestamp and not a server nonce: a nonce needs its own round trip and a stored
challenge (one more write per join); a timestamp costs nothing until it is used, and "accepted
once" is one more conditional Put in the transaction the join already makes (`PROOF#<digest of the
signed message>`, `attribute_not_exists`). The cache keys on the *message*, not the signature:
ECDSA signatures are malleable, so keying on signature bytes would let a replayer mint a "new"
proof from a captured one. Records outlive the window (TTL) and the window check comes first, so
an expired record that DynamoDB has not deleted yet changes nothing.

Header: `Joinplane-Proof: t=<unix seconds>,n=<nonce>,sig=<base64>[,key=<base64 DER SPKI>]`.
`key` is needed only when the signer is not the CSR's key (a renewal that rotates the key signs
with the old one). Signatures: ECDSA with SHA-256 (DER, what `openssl dgst -sha256 -sign` makes),
RSA PKCS#1 v1.5 with SHA-256, or Ed25519 over the message itself.

`cryptography` is imported inside `verify` only: the proof costs nothing at cold start.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from joinplane import clock, store
from joinplane.errors import InvalidArgument, Unauthenticated

HEADER = "joinplane-proof"
VERSION = "joinplane-proof-v1"
# How old a proof may be, and how far ahead of ours a machine's clock may run.
WINDOW_SECONDS = 300
FUTURE_SKEW_SECONDS = 60
MAX_HEADER_CHARS = 4096
# Proof records are kept past the window; after it the timestamp alone refuses the proof.
RECORD_TTL_SECONDS = WINDOW_SECONDS + FUTURE_SKEW_SECONDS + 3600

REQUIRED = (
    "this key has joined before: credentials for it are handed out again only with a fresh proof of "
    "possession of the key (a Joinplane-Proof header; see docs/join.md)"
)
STALE = "the Joinplane-Proof is too old or from the future (check the machine's clock)"
BAD = "the Joinplane-Proof signature does not verify for this request and key"
REPLAYED = "this Joinplane-Proof was already used; sign a new one"

_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


@dataclass(frozen=True)
class Proof:
    timestamp: int
    nonce: str
    signature: bytes
    key_der: bytes | None


@dataclass(frozen=True)
class VerifiedProof:
    """A proof that verified and has not been used yet; `write` uses it up (in a transaction)."""

    digest: str
    signer_sha256: str
    timestamp: int

    def write(self) -> store.Write:
        pk = f"PROOF#{self.digest}"
        return store.Write(
            "Put",
            item={
                "pk": pk,
                "sk": "PROOF",
                "signer": self.signer_sha256,
                "ttl": self.timestamp + RECORD_TTL_SECONDS,
            },
            condition="attribute_not_exists(pk)",
        )

    def use(self) -> None:
        """Use the proof up on a path that writes nothing else (a pending retry)."""
        record = self.write()
        assert record.item is not None
        try:
            store.put(record.item, condition=record.condition)
        except store.ConditionFailed:
            raise Unauthenticated(REPLAYED) from None


def _b64(value: str, name: str) -> bytes:
    if not _B64.fullmatch(value):
        raise InvalidArgument(f"Joinplane-Proof {name} is not base64")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(f"Joinplane-Proof {name} is not base64") from None


def parse(header: str) -> Proof | None:
    """The header's parts; None when there is no header. Malformed headers are INVALID_ARGUMENT."""
    if not header:
        return None
    if len(header) > MAX_HEADER_CHARS:
        raise InvalidArgument(f"Joinplane-Proof is longer than {MAX_HEADER_CHARS} characters")
    parts: dict[str, str] = {}
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or name not in ("t", "n", "sig", "key"):
            raise InvalidArgument(
                "Joinplane-Proof must be t=<unix seconds>,n=<nonce>,sig=<base64>[,key=<base64>]"
            )
        if name in parts:
            raise InvalidArgument(f"Joinplane-Proof gives {name} twice")
        parts[name] = value.strip()
    if not {"t", "n", "sig"} <= parts.keys():
        raise InvalidArgument("Joinplane-Proof needs t=, n= and sig=")
    if not re.fullmatch(r"[0-9]{1,12}", parts["t"]):
        raise InvalidArgument("Joinplane-Proof t must be Unix seconds")
    if not re.fullmatch(r"[A-Za-z0-9_-]{16,64}", parts["n"]):
        raise InvalidArgument("Joinplane-Proof n must be 16 to 64 of A-Z a-z 0-9 _ -")
    return Proof(
        timestamp=int(parts["t"]),
        nonce=parts["n"],
        signature=_b64(parts["sig"], "sig"),
        key_der=_b64(parts["key"], "key") if "key" in parts else None,
    )


def message(purpose: str, timestamp: int, nonce: str, credential: str, body: bytes) -> bytes:
    """The signed bytes; clients build exactly this (README has it as a printf)."""
    return (
        f"{VERSION}\n{purpose}\n{timestamp}\n{nonce}\n"
        f"{hashlib.sha256(credential.encode()).hexdigest()}\n{hashlib.sha256(body).hexdigest()}\n"
    ).encode()


def verify(
    proof: Proof, *, purpose: str, credential: str, body: bytes, key: Any, identity: str
) -> VerifiedProof:
    """Check `proof` was made within the window by the key whose SPKI hashes to `identity`.

    `key` is the CSR's public key; the header's `key=` (if any) replaces it, and is then what must
    hash to `identity`."""
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

    now = int(clock.epoch())
    if not now - WINDOW_SECONDS <= proof.timestamp <= now + FUTURE_SKEW_SECONDS:
        raise Unauthenticated(STALE)
    if proof.key_der is not None:
        try:
            key = serialization.load_der_public_key(proof.key_der)
        except (ValueError, UnsupportedAlgorithm):
            raise InvalidArgument("Joinplane-Proof key is not a DER SubjectPublicKeyInfo") from None
    spki = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    signer = hashlib.sha256(spki).hexdigest()
    if signer != identity:
        raise Unauthenticated("the Joinplane-Proof must be signed with the machine's current key")
    signed = message(purpose, proof.timestamp, proof.nonce, credential, body)
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(proof.signature, signed, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(proof.signature, signed, padding.PKCS1v15(), hashes.SHA256())
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(proof.signature, signed)
        else:
            raise Unauthenticated(BAD)
    except (InvalidSignature, ValueError):
        raise Unauthenticated(BAD) from None
    # One record per signed message and signer: the same message can be accepted once only.
    digest = hashlib.sha256(signer.encode() + b"\n" + signed).hexdigest()
    return VerifiedProof(digest=digest, signer_sha256=signer, timestamp=proof.timestamp)
