"""Prefixed, lowercase ULIDs: `jreq_01j9...`.

Lowercase Crockford base32 (no i, l, o, u) so ids match the joinRequests API's pattern
`^jreq_[0-9a-hjkmnp-tv-z]{26,52}$`, sort by creation time as strings, and carry 80 random bits.
"""

from joinplane import clock

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
# The one regex character class of that alphabet, and a ULID in it: every id and secret pattern
# (wire, credentials, views, join_requests) is built from these.
BASE32 = "[0-9a-hjkmnp-tv-z]"
ULID_PATTERN = BASE32 + "{26}"

# Each id's pattern, here below the models that validate ids and the views that describe them, so
# neither imports the other for it. The joinRequests API allows up to 52 characters after its
# prefix; ours are ULIDs (26).
KEY_ID = rf"^key_{ULID_PATTERN}$"
TOKEN_ID = rf"^jtok_{ULID_PATTERN}$"
MACHINE_ID = rf"^mach_{ULID_PATTERN}$"
ENTRY_ID = rf"^disc_{ULID_PATTERN}$"
REQUEST_ID = rf"^jreq_{BASE32}{{26,52}}$"


def encode_base32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 32)
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))


def new_ulid() -> str:
    # Imported here: `secrets` costs ~4 ms at import, and most functions read ids' patterns only.
    import secrets

    millis = int(clock.epoch() * 1000)
    return encode_base32(millis, 10) + encode_base32(secrets.randbits(80), 16)


def new_id(prefix: str) -> str:
    return f"{prefix}_{new_ulid()}"
