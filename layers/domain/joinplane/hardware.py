"""Hardware identifiers: their canonical spelling, and the placeholder values firmware ships.

Pure functions, no I/O. The discovery inventory stores identifiers in the canonical forms made here,
and the join endpoint canonicalises what a machine reports with the same functions, so that one
machine is one key whichever tool read its identifiers.

A placeholder is a value that many machines share because nobody programmed the real one (a board
vendor's default, a tool's "not present" text). Matching on it would make every such machine the
same machine, so placeholders are never registered, never matched, and a join reporting one is
deferred to a person.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_UUID_HYPHENATED = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UUID_BARE = re.compile(r"[0-9a-f]{32}")
_MAC_COLON = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
_MAC_DASH = re.compile(r"[0-9a-f]{2}(?:-[0-9a-f]{2}){5}")
_MAC_BARE = re.compile(r"[0-9a-f]{12}")

# Serials compared with case, whitespace and punctuation squashed out ("To be filled by O.E.M." and
# "TO BE FILLED BY OEM" are one value). Firmware defaults (AMI, Insyde, Phoenix boards; the SMBIOS
# type 1/2/3 string templates) and what dmidecode, WMI and osquery print when the field is unset.
_PLACEHOLDER_SERIALS = frozenset(
    {
        "tobefilledbyoem",
        "defaultstring",
        "systemserialnumber",
        "chassisserialnumber",
        "baseboardserialnumber",
        "type2boardserialnumber",
        "serialnumber",
        "serial",
        "notspecified",
        "notapplicable",
        "notavailable",
        "notpresent",
        "notsettable",
        "none",
        "null",
        "na",
        "oem",
        "unknown",
        "invalid",
        "empty",
        "default",
    }
)
# Counting runs a person types into a blank field.
_COUNTING_SERIALS = frozenset(
    {"0123456789"[:n] for n in range(6, 11)}
    | {"123456789"[:n] for n in range(6, 10)}
    | {"1234567890", "0987654321", "9876543210", "987654321"}
)

# Sources: DMTF SMBIOS DSP0134 7.2.1 (all 00h: no UUID; all FFh: present but not set);
# osquery's kPlaceholderHardwareUUIDList (osquery/core/system.cpp: the AMI Aptio default
# 03000200-..., 03020100-..., 10000000-0000-8000-0040-...); 12345678-1234-5678-90ab-cddeefaabbcc,
# an unprogrammed-board default on the deny-lists of several inventory agents.
_PLACEHOLDER_UUIDS = (
    "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "03000200-0400-0500-0006-000700080009",
    "03020100-0504-0706-0809-0a0b0c0d0e0f",
    "10000000-0000-8000-0040-000000000000",
    "12345678-1234-5678-90ab-cddeefaabbcc",
)
# dmidecode prints these words in place of an all-00h / all-FFh UUID.
_UUID_WORDS = frozenset({"notpresent", "notsettable", "none", "na", "unknown", "notspecified"})

# Broadcast and all-zero are never a NIC's own address; 02:00:00:00:00:00 is what Android 6+ hands
# apps instead of the real MAC (Android 6.0 behaviour changes), and agents built on it report that.
_PLACEHOLDER_MACS = frozenset({"00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", "02:00:00:00:00:00"})


def _swap_mixed_endian(canonical: str) -> str:
    """The same 16 bytes read with the other byte order for the first three fields. SMBIOS 2.6
    made them little-endian; older boards and some tools still print the raw order, so one
    firmware default shows up spelled two ways."""
    raw = bytes.fromhex(canonical.replace("-", ""))
    swapped = (raw[3::-1] + raw[5:3:-1] + raw[7:5:-1] + raw[8:]).hex()
    return f"{swapped[:8]}-{swapped[8:12]}-{swapped[12:16]}-{swapped[16:20]}-{swapped[20:]}"


_PLACEHOLDER_UUID_SET = frozenset(_PLACEHOLDER_UUIDS) | {_swap_mixed_endian(u) for u in _PLACEHOLDER_UUIDS}


def _squash(value: str) -> str:
    return re.sub(r"[\s._/\\-]+", "", value).lower()


def normalize_serial(value: str) -> str:
    """Trimmed and uppercased. ValueError for an empty value or one with control characters."""
    trimmed = value.strip()
    if not trimmed:
        raise ValueError("is empty")
    if _CONTROL.search(trimmed):
        raise ValueError("contains control characters")
    return trimmed.upper()


def normalize_uuid(value: str) -> str:
    """Lowercase 8-4-4-4-12. Accepts uppercase, braces (`{...}`, as Windows prints it) and the
    32-digit form without hyphens. ValueError for anything else."""
    text = value.strip().lower()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if _UUID_HYPHENATED.fullmatch(text):
        return text
    if _UUID_BARE.fullmatch(text):
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    raise ValueError("is not a UUID (8-4-4-4-12 hexadecimal digits)")


def normalize_mac(value: str) -> str:
    """Lowercase, colon-separated. Accepts `:` or `-` separators or none (one style per address).
    ValueError for anything else."""
    text = value.strip().lower()
    if _MAC_COLON.fullmatch(text) or _MAC_DASH.fullmatch(text):
        digits = text.replace(":", "").replace("-", "")
    elif _MAC_BARE.fullmatch(text):
        digits = text
    else:
        raise ValueError("is not a MAC address (six hexadecimal octets)")
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def serial_placeholder(value: str) -> str | None:
    """Why this serial is a placeholder, or None when it may identify a machine."""
    squashed = _squash(value)
    if not squashed:
        return "is empty"
    if squashed in _PLACEHOLDER_SERIALS:
        return f"{value.strip()!r} is a firmware placeholder, not a serial number"
    if squashed in _COUNTING_SERIALS:
        return f"{value.strip()!r} is a placeholder counting sequence, not a serial number"
    if len(set(squashed)) == 1:
        return f"{value.strip()!r} is a placeholder (one repeated character)"
    return None


def uuid_placeholder(value: str) -> str | None:
    """Why this system UUID cannot identify a machine (a placeholder, or not a UUID at all)."""
    if not value.strip():
        return "is empty"
    if _squash(value) in _UUID_WORDS:
        return f"{value.strip()!r} is what firmware tools print when there is no UUID"
    try:
        canonical = normalize_uuid(value)
    except ValueError as invalid:
        return str(invalid)
    if canonical in _PLACEHOLDER_UUID_SET:
        return f"{canonical} is a firmware placeholder UUID"
    if len(set(canonical.replace("-", ""))) == 1:
        return f"{canonical} is a placeholder (one repeated digit)"
    return None


def mac_placeholder(value: str) -> str | None:
    """Why this MAC address cannot identify a machine (a placeholder, or not a MAC at all)."""
    if not value.strip():
        return "is empty"
    try:
        canonical = normalize_mac(value)
    except ValueError as invalid:
        return str(invalid)
    if canonical in _PLACEHOLDER_MACS:
        return f"{canonical} is a placeholder address"
    if int(canonical[:2], 16) & 1:
        # The I/G bit: a group address is never an interface's own.
        return f"{canonical} is a multicast address, never an interface's own"
    return None


def placeholder_reasons(
    serial: str | None, system_uuid: str | None, macs: Iterable[str]
) -> list[tuple[str, str]]:
    """(field, why) for every identifier that cannot tell one machine from another. Absent values
    (None, no MACs) are not reasons: only values that were reported and are useless."""
    reasons: list[tuple[str, str]] = []
    if serial is not None and (why := serial_placeholder(serial)) is not None:
        reasons.append(("serialNumber", why))
    if system_uuid is not None and (why := uuid_placeholder(system_uuid)) is not None:
        reasons.append(("systemUuid", why))
    for index, mac in enumerate(macs):
        if (why := mac_placeholder(mac)) is not None:
            reasons.append((f"macAddresses.{index}", why))
    return reasons
