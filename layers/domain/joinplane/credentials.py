"""Secrets handed to callers: API keys, join tokens, machine tokens, cluster keys.

Shape: `<prefix>_<ulid>_<32 base32 chars>`. The ULID names the record the secret belongs to, so
verification is one GetItem by id and a constant-time comparison of SHA-256 digests; the random
part carries 160 bits. Only the digest is stored; the secret is returned once, at creation, and is
never logged. A plain (unsalted) SHA-256 is enough here: the secret is random, not a password.
"""

import hashlib
import hmac
import re
import secrets
from typing import NamedTuple

from joinplane.ids import BASE32, ULID_PATTERN, encode_base32

SECRET_CHARS = 32  # 32 base32 characters = 160 bits


class ParsedSecret(NamedTuple):
    prefix: str
    ulid: str
    secret: str


def mint(prefix: str, ulid: str) -> str:
    return f"{prefix}_{ulid}_{encode_base32(secrets.randbits(SECRET_CHARS * 5), SECRET_CHARS)}"


def pattern(prefix: str) -> str:
    """The regex of a `prefix` secret (also the views' schema pattern): `<prefix>_<ULID>_<secret>`."""
    return f"^{re.escape(prefix)}_{ULID_PATTERN}_{BASE32}{{{SECRET_CHARS}}}$"


def parse(value: str, prefix: str) -> ParsedSecret | None:
    """The record id embedded in a secret, or None when it is not one of ours (no lookup then)."""
    if len(value) > 128:
        return None
    if not re.fullmatch(pattern(prefix), value):
        return None
    ulid_at = len(prefix) + 1
    return ParsedSecret(prefix, value[ulid_at : ulid_at + 26], value)


def bearer(authorization: str) -> str:
    """The credential of an `Authorization: Bearer <credential>` header; "" for any other scheme."""
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def matches(secret: str, stored_digest: str) -> bool:
    return hmac.compare_digest(digest(secret).encode(), stored_digest.encode())
