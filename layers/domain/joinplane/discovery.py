"""The discovery inventory: the machines a site expects. The `discovery` attestor admits a join
whose hardware identifiers match an entry and defers one it does not know.

Stored as `joinplane.dal.discovery` describes: an entry item, and one index item per identifier
that keeps the identifier on at most one entry of the site and makes a join's lookup one read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from joinplane import clock, hardware, ids, pools
from joinplane.dal import discovery as discovery_db
from joinplane.dal.discovery import DiscoveryEntryRecord
from joinplane.errors import AlreadyExists, InvalidArgument, NotFound, Unavailable
from joinplane.grants import Principal
from joinplane.pools import SiteRef
from joinplane.wire import TEXT

if TYPE_CHECKING:
    from joinplane import views

READ, WRITE = "compute:discovery:read", "compute:discovery:write"
ID_PREFIX = "disc"
MAX_MACS = 32
# A canonical identifier's bound in UTF-8: index keys stay far inside DynamoDB's 1 KiB sort key.
MAX_VALUE_BYTES = 512
# Printable ASCII only: DynamoDB caps a sort key at 1024 bytes, and 256 characters of 4-byte UTF-8
# would not fit beside the key's prefix.
FINGERPRINT = r"^[\x20-\x7e]{1,256}$"
HOSTNAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"
# Index item kinds, and the request field each one comes from (errors name the field).
FIELD_OF = {
    "serial": "serialNumber",
    "uuid": "systemUuid",
    "mac": "macAddresses",
    "fingerprint": "machineFingerprint",
}
# When a join's identifiers point at different entries, the strongest match names the machine:
# the firmware UUID and serial are per board, a fingerprint is what the agent derived, and NICs move
# between machines.
_STRENGTH = {"uuid": 0, "serial": 1, "fingerprint": 2, "mac": 3}


def _invalid(reason: str) -> PydanticCustomError:
    return PydanticCustomError("invalid_identifier", "{reason}", {"reason": reason})


def _serial(value: str) -> str:
    if (why := hardware.serial_placeholder(value)) is not None:
        raise _invalid(why)
    try:
        canonical = hardware.normalize_serial(value)
    except ValueError as invalid:
        raise _invalid(str(invalid)) from None
    if len(canonical.encode()) > MAX_VALUE_BYTES:
        raise _invalid(f"is over {MAX_VALUE_BYTES} bytes")
    return canonical


def _uuid(value: str) -> str:
    try:
        canonical = hardware.normalize_uuid(value)
    except ValueError as invalid:
        raise _invalid(str(invalid)) from None
    if (why := hardware.uuid_placeholder(canonical)) is not None:
        raise _invalid(why)
    return canonical


def _mac(value: str) -> str:
    try:
        canonical = hardware.normalize_mac(value)
    except ValueError as invalid:
        raise _invalid(str(invalid)) from None
    if (why := hardware.mac_placeholder(canonical)) is not None:
        raise _invalid(why)
    return canonical


def _fingerprint(value: str) -> str:
    if not value.strip():
        raise _invalid("is blank")
    return value


Serial = Annotated[str, Field(max_length=128, pattern=TEXT), AfterValidator(_serial)]
SystemUuid = Annotated[str, Field(max_length=64), AfterValidator(_uuid)]
Mac = Annotated[str, Field(max_length=32), AfterValidator(_mac)]
Fingerprint = Annotated[str, Field(pattern=FINGERPRINT), AfterValidator(_fingerprint)]


class RegisterEntry(SiteRef):
    """At least one identifier; each is canonicalised, and placeholders are refused."""

    serialNumber: Serial | None = None
    systemUuid: SystemUuid | None = None
    macAddresses: list[Mac] = Field(default_factory=list, max_length=MAX_MACS)
    machineFingerprint: Fingerprint | None = None
    hostname: str | None = Field(default=None, pattern=HOSTNAME)
    description: str = Field(default="", max_length=256, pattern=TEXT)

    @field_validator("macAddresses")
    @classmethod
    def _distinct(cls, macs: list[str]) -> list[str]:
        # "AA-BB-.." and "aa:bb:.." are one address: keep it once rather than index it twice.
        return list(dict.fromkeys(macs))

    @model_validator(mode="after")
    def _some_identifier(self) -> RegisterEntry:
        if not (self.serialNumber or self.systemUuid or self.macAddresses or self.machineFingerprint):
            raise PydanticCustomError(
                "missing_identifier",
                "give at least one identifier: serialNumber, systemUuid, macAddresses or machineFingerprint",
            )
        return self


class ListEntries(SiteRef):
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=ids.ENTRY_ID)


class RemoveEntry(SiteRef):
    entryId: str = Field(pattern=ids.ENTRY_ID)


def view(entry: DiscoveryEntryRecord) -> views.DiscoveryEntry:
    return {
        "entryId": entry.entry_id,
        "tenantId": entry.tenant_id,
        "siteId": entry.site_id,
        "serialNumber": entry.serial_number,
        "systemUuid": entry.system_uuid,
        "macAddresses": entry.mac_addresses,
        "machineFingerprint": entry.machine_fingerprint,
        "hostname": entry.hostname,
        "description": entry.description,
        "createdAt": entry.created_at,
        "createdBy": entry.created_by,
    }


def _site(principal: Principal, request: SiteRef, permission: str) -> None:
    pools.load_site(principal, request.tenantId, request.siteId, permission)


def register(principal: Principal, request: RegisterEntry) -> views.DiscoveryEntry:
    _site(principal, request, WRITE)
    entry = DiscoveryEntryRecord(
        entry_id=ids.new_id(ID_PREFIX),
        tenant_id=request.tenantId,
        site_id=request.siteId,
        serial_number=request.serialNumber,
        system_uuid=request.systemUuid,
        mac_addresses=request.macAddresses,
        machine_fingerprint=request.machineFingerprint,
        hostname=request.hostname,
        description=request.description,
        created_at=clock.rfc3339(clock.now()),
        created_by=principal.key_id,
    )
    try:
        discovery_db.register(entry)
    except discovery_db.IdentifiersTaken as taken:
        details = [
            {"field": FIELD_OF[t.kind], "reason": f"{t.value} is already registered (entry {t.holder})"}
            for t in taken.taken
        ]
        first = details[0]
        raise AlreadyExists(
            f"{first['field']}: {first['reason']} at site {entry.site_id!r}; nothing was registered", details
        ) from None
    except discovery_db.EntryIdTaken:
        # A ULID clash, which a retry fixes.
        raise Unavailable("could not allocate an entry id, retry") from None
    return view(entry)


def list_entries(principal: Principal, request: ListEntries) -> views.DiscoveryList:
    """Entries oldest first (entry ids are ULIDs). Index items sort after the entries in the same
    partition: a page that reaches one has reached the end."""
    _site(principal, request, READ)
    page = discovery_db.list_entries(
        request.tenantId, request.siteId, after=request.cursor, limit=request.limit
    )
    entries = [view(entry) for entry in page.entries]
    result: views.DiscoveryList = {"entries": entries}
    if page.more and entries:
        result["nextCursor"] = entries[-1]["entryId"]
    return result


def remove(principal: Principal, request: RemoveEntry) -> views.DiscoveryEntry:
    _site(principal, request, WRITE)
    entry = discovery_db.get(request.tenantId, request.siteId, request.entryId)
    if entry is None:
        raise NotFound("discovery entry not found")
    try:
        discovery_db.remove(entry, by=principal.key_id, now=clock.now())
    except discovery_db.EntryGone:
        # A concurrent remove got there first.
        raise NotFound("discovery entry not found") from None
    return view(entry)


@dataclass(frozen=True)
class DiscoveryMatch:
    """The inventory's answer for a joining machine: the entry it is, by which of its reported
    identifiers (`serialNumber`, `systemUuid`, `macAddresses`, `machineFingerprint`), and any other
    entries some of its identifiers name."""

    entry_id: str
    hostname: str | None
    matched_by: tuple[str, ...]
    other_entry_ids: tuple[str, ...]


def lookup(
    tenant_id: str,
    site_id: str,
    *,
    serial: str | None = None,
    system_uuid: str | None = None,
    macs: Iterable[str] = (),
    fingerprint: str | None = None,
) -> DiscoveryMatch | None:
    """The site's entry for a machine reporting these identifiers, or None. One BatchGetItem over
    the candidates' index keys (no call at all when no identifier is usable). Values are
    canonicalised as at registration; malformed values and placeholders are skipped: they match
    nothing, because they could not have been registered.

    When the identifiers point at different entries, the entry matched by the most identifiers wins (then the
    strongest: UUID, serial, fingerprint, MAC) and the others are listed for the attestor to weigh.
    """
    reported: list[tuple[str, str | None]] = [
        ("serial", _canonical(hardware.normalize_serial, serial, hardware.serial_placeholder)),
        ("uuid", _canonical(hardware.normalize_uuid, system_uuid, hardware.uuid_placeholder)),
        *(("mac", _canonical(hardware.normalize_mac, mac, hardware.mac_placeholder)) for mac in macs),
    ]
    if fingerprint is not None and re.fullmatch(FINGERPRINT, fingerprint) and fingerprint.strip():
        reported.append(("fingerprint", fingerprint))
    candidates = list(dict.fromkeys((kind, value) for kind, value in reported if value is not None))
    if len(candidates) > MAX_MACS + 3:
        raise InvalidArgument(
            f"too many identifiers to look up: at most {MAX_MACS} MAC addresses",
            [{"field": "macAddresses", "reason": f"at most {MAX_MACS}"}],
        )
    if not candidates:
        return None

    matches: dict[str, set[str]] = {}
    hostnames: dict[str, str | None] = {}
    for (kind, _), match in discovery_db.lookup(tenant_id, site_id, candidates).items():
        matches.setdefault(match.entry_id, set()).add(kind)
        hostnames[match.entry_id] = match.hostname
    if not matches:
        return None
    ranked = sorted(
        matches, key=lambda entry: (-len(matches[entry]), min(_STRENGTH[k] for k in matches[entry]), entry)
    )
    best = ranked[0]
    return DiscoveryMatch(
        entry_id=best,
        hostname=hostnames[best],
        matched_by=tuple(field for kind, field in FIELD_OF.items() if kind in matches[best]),
        other_entry_ids=tuple(ranked[1:]),
    )


def _canonical(
    normalize: Callable[[str], str], value: str | None, placeholder: Callable[[str], str | None]
) -> str | None:
    if value is None or placeholder(value) is not None:
        return None
    try:
        canonical = normalize(value)
    except ValueError:
        return None
    # Longer than any registered value could be; also keeps the key within DynamoDB's 1 KiB.
    return canonical if len(canonical.encode()) <= MAX_VALUE_BYTES else None
