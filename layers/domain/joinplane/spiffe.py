"""SPIFFE IDs of machines: `spiffe://<trust domain>/tenant/<tenant>/pool/<pool>/machine/<machineId>`.

The SPIFFE ID standard allows `[a-z0-9._-]` in the trust domain (the URI's host: no port, no
userinfo, no capitals), `[A-Za-z0-9._-]` in a path segment, and no empty, `.` or `..` segment. So
the trust domain is a deployment setting (`SPIFFE_TRUST_DOMAIN`), never a tenant, and each tenant
and pool id becomes one path segment by this reversible escape:

- `:` becomes `_3a` and `_` becomes `_5f`: `_` and the character's two lowercase hex digits, as
  percent-encoding would write it with `_` for `%` (which SPIFFE does not allow);
- a leading `.` becomes `_2e`, so no segment is `.` or `..`;
- every other character (letters of either case, digits, `.`, `-`) stays as it is.

Every `_` in a segment starts an escape, so a segment reads back as exactly one id: ids that differ
in anything, case or `:` against `.` included, get different segments. `_` is the escape because it
is the rarest of the three punctuation marks in DNS- and Kubernetes-style names; machine ids
(`mach_<ulid>`) are segments already and go in as they are.

No `cryptography` here: `id_from_segment` serves relying parties that map an ID back to its tenant.
"""

from __future__ import annotations

import re

# RFC 3986 caps a host at 255 characters; the SPIFFE ID standard repeats it for trust domains.
TRUST_DOMAIN = re.compile(r"[a-z0-9._-]{1,255}")
MAX_LENGTH = 2048
# Every tenant and pool id the API accepts (tenant `^[A-Za-z0-9._:-]{1,128}$`, pools narrower).
_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_ESCAPES = {":": "_3a", "_": "_5f"}
_LEADING_DOT = "_2e"
_ESCAPED = re.compile(r"_(3a|5f|2e)")


def segment(id_: str) -> str:
    """The path segment of a tenant or pool id. ValueError for anything the API would not accept."""
    if not isinstance(id_, str) or not _ID.fullmatch(id_):
        raise ValueError(f"{id_!r} is not a tenant or pool id")
    encoded = "".join(_ESCAPES.get(character, character) for character in id_)
    return _LEADING_DOT + encoded[1:] if encoded.startswith(".") else encoded


def id_from_segment(segment_: str) -> str:
    """The id whose segment this is; ValueError unless `segment()` writes exactly this segment."""
    if not isinstance(segment_, str) or not _SEGMENT.fullmatch(segment_):
        raise ValueError(f"{segment_!r} is not a SPIFFE path segment")
    decoded = _ESCAPED.sub(lambda match: chr(int(match.group(1), 16)), segment_)
    # The canonical form only: `_2e` past the start, a stray `_` or uppercase hex read as no id.
    if not _ID.fullmatch(decoded) or segment(decoded) != segment_:
        raise ValueError(f"{segment_!r} is not the segment of any tenant or pool id")
    return decoded


def check_trust_domain(trust_domain: str) -> str:
    if not isinstance(trust_domain, str) or not TRUST_DOMAIN.fullmatch(trust_domain):
        raise ValueError(
            f"{trust_domain!r} is not a SPIFFE trust domain: lowercase letters, digits, '.', '-', '_' (1-255)"
        )
    return trust_domain


def for_machine(trust_domain: str, tenant_id: str, pool_id: str, machine_id: str) -> str:
    """The machine's SPIFFE ID. ValueError for a bad trust domain or id."""
    if not _SEGMENT.fullmatch(machine_id) or machine_id in (".", ".."):
        raise ValueError(f"{machine_id!r} is not a SPIFFE path segment")
    uri = (
        f"spiffe://{check_trust_domain(trust_domain)}"
        f"/tenant/{segment(tenant_id)}/pool/{segment(pool_id)}/machine/{machine_id}"
    )
    # Cannot happen with the bounds above (at most 1129 characters); stated so it stays true.
    if len(uri) > MAX_LENGTH:
        raise ValueError(f"SPIFFE ID longer than {MAX_LENGTH} bytes")
    return uri
