"""Prefixed, lowercase ULIDs: `jreq_01j9...`.

Lowercase Crockford base32 (no i, l, o, u) so ids match the seed pattern
`^jreq_[0-9a-hjkmnp-tv-z]{26,52}$`, sort by creation time as strings, and carry 80 random bits.
"""

import re
import secrets

from joinplane import clock

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
ULID_PATTERN = "[0-9a-hjkmnp-tv-z]{26}"


def encode_base32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 32)
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))


def new_ulid() -> str:
    millis = int(clock.epoch() * 1000)
    return encode_base32(millis, 10) + encode_base32(secrets.randbits(80), 16)


def new_id(prefix: str) -> str:
    return f"{prefix}_{new_ulid()}"


def is_id(value: str, prefix: str) -> bool:
    return re.fullmatch(f"{re.escape(prefix)}_{ULID_PATTERN}", value) is not None
