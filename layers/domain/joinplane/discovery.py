"""The discovery inventory: the machines a site expects. The `discovery` attestor admits a join
whose hardware identifiers match an entry and defers one it does not know.

Stored in one partition per site, `SITE#<tenantId>#<siteId>#DISCOVERY`:
- `ENTRY#<entryId>`: the entry as registered (identifiers in canonical form).
- `ID#<kind>#<value>` for each identifier (kind `serial`, `uuid`, `mac`, `fingerprint`): holds the
  entryId and hostname, so a join's lookup is one BatchGetItem over its identifiers' keys, and its
  conditional creation is what keeps an identifier on at most one entry of the site.

An entry and its index items are written and deleted in one transaction: no reader ever sees an
index item without its entry, nor an entry whose identifiers another entry also claims.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from joinplane import clock, hardware, ids, pools, store
from joinplane.errors import AlreadyExists, InvalidArgument, JoinplaneError, NotFound, Unavailable
from joinplane.grants import Principal
from joinplane.pools import SiteRef
from joinplane.wire import TEXT, ULID

if TYPE_CHECKING:
    from joinplane import views

READ, WRITE = "compute:discovery:read", "compute:discovery:write"
ID_PREFIX = "disc"
ENTRY_ID = rf"^disc_{ULID}$"
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
# A transaction that lost to a concurrent one on the same items is cancelled without a verdict on
# our conditions; trying again gets one.
_CONFLICT_ATTEMPTS = 3


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
    cursor: str | None = Field(default=None, pattern=ENTRY_ID)


class RemoveEntry(SiteRef):
    entryId: str = Field(pattern=ENTRY_ID)


def partition(tenant_id: str, site_id: str) -> str:
    return f"SITE#{tenant_id}#{site_id}#DISCOVERY"


def entry_key(tenant_id: str, site_id: str, entry_id: str) -> tuple[str, str]:
    return partition(tenant_id, site_id), f"ENTRY#{entry_id}"


def index_key(tenant_id: str, site_id: str, kind: str, value: str) -> tuple[str, str]:
    return partition(tenant_id, site_id), f"ID#{kind}#{value}"


def identifiers(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, canonical value) of every identifier an entry (item or request fields) carries."""
    found: list[tuple[str, str]] = []
    if entry.get("serialNumber"):
        found.append(("serial", entry["serialNumber"]))
    if entry.get("systemUuid"):
        found.append(("uuid", entry["systemUuid"]))
    found += [("mac", mac) for mac in entry.get("macAddresses") or []]
    if entry.get("machineFingerprint"):
        found.append(("fingerprint", entry["machineFingerprint"]))
    return found


def view(item: dict[str, Any]) -> views.DiscoveryEntry:
    return {
        "entryId": item["entryId"],
        "tenantId": item["tenantId"],
        "siteId": item["siteId"],
        "serialNumber": item.get("serialNumber"),
        "systemUuid": item.get("systemUuid"),
        "macAddresses": item.get("macAddresses") or [],
        "machineFingerprint": item.get("machineFingerprint"),
        "hostname": item.get("hostname"),
        "description": item.get("description", ""),
        "createdAt": item["createdAt"],
        "createdBy": item.get("createdBy"),
    }


def _site(principal: Principal, request: SiteRef, permission: str) -> None:
    pools.load_site(principal, request.tenantId, request.siteId, permission)


def register(principal: Principal, request: RegisterEntry) -> views.DiscoveryEntry:
    _site(principal, request, WRITE)
    entry_id = ids.new_id(ID_PREFIX)
    tenant, site = request.tenantId, request.siteId
    pk, sk = entry_key(tenant, site, entry_id)
    item = {
        "pk": pk,
        "sk": sk,
        "entryId": entry_id,
        "tenantId": tenant,
        "siteId": site,
        "serialNumber": request.serialNumber,
        "systemUuid": request.systemUuid,
        "macAddresses": request.macAddresses,
        "machineFingerprint": request.machineFingerprint,
        "hostname": request.hostname,
        "description": request.description,
        "createdAt": clock.rfc3339(clock.now()),
        "createdBy": principal.key_id,
    }
    claimed = identifiers(item)
    writes = [store.Write("Put", item=item, condition="attribute_not_exists(pk)")]
    for kind, value in claimed:
        index_pk, index_sk = index_key(tenant, site, kind, value)
        index_item = {
            "pk": index_pk,
            "sk": index_sk,
            "entryId": entry_id,
            "tenantId": tenant,
            "siteId": site,
            "kind": kind,
            "value": value,
            "hostname": request.hostname,
        }
        writes.append(store.Write("Put", item=index_item, condition="attribute_not_exists(pk)"))
    _transact(writes, on_condition=lambda canceled: _already_registered(canceled, claimed, site))
    return view(item)


def _already_registered(
    canceled: store.TransactionCanceled, claimed: list[tuple[str, str]], site_id: str
) -> JoinplaneError:
    details = []
    for (kind, value), reason, current in zip(
        claimed, canceled.reasons[1:], canceled.current[1:], strict=False
    ):
        if reason == "ConditionalCheckFailed":
            holder = (current or {}).get("entryId")
            details.append(
                {"field": FIELD_OF[kind], "reason": f"{value} is already registered (entry {holder})"}
            )
    if not details:
        # Only the new entry's own key can have collided: a ULID clash, which a retry fixes.
        return Unavailable("could not allocate an entry id, retry")
    first = details[0]
    return AlreadyExists(
        f"{first['field']}: {first['reason']} at site {site_id!r}; nothing was registered", details
    )


def _transact(
    writes: list[store.Write], *, on_condition: Callable[[store.TransactionCanceled], JoinplaneError]
) -> None:
    for _ in range(_CONFLICT_ATTEMPTS):
        try:
            store.transact(writes)
            return
        except store.TransactionCanceled as canceled:
            if "ConditionalCheckFailed" in canceled.reasons:
                raise on_condition(canceled) from None
            if "TransactionConflict" not in canceled.reasons:
                raise
    raise Unavailable("the site's inventory is busy, retry")


def list_entries(principal: Principal, request: ListEntries) -> views.DiscoveryList:
    """Entries oldest first (entry ids are ULIDs). Index items sort after the entries in the same
    partition: a page that reaches one has reached the end."""
    _site(principal, request, READ)
    pk = partition(request.tenantId, request.siteId)
    page = (
        store.query(pk=pk, sk_after=f"ENTRY#{request.cursor}", limit=request.limit, consistent=True)
        if request.cursor
        else store.query(pk=pk, sk_prefix="ENTRY#", limit=request.limit, consistent=True)
    )
    entries = [view(item) for item in page.items if item["sk"].startswith("ENTRY#")]
    result: views.DiscoveryList = {"entries": entries}
    reached_end = len(entries) < len(page.items)
    if page.last_key is not None and entries and not reached_end:
        result["nextCursor"] = entries[-1]["entryId"]
    return result


def remove(principal: Principal, request: RemoveEntry) -> views.DiscoveryEntry:
    _site(principal, request, WRITE)
    tenant, site = request.tenantId, request.siteId
    item = store.get(*entry_key(tenant, site, request.entryId))
    if item is None:
        raise NotFound("discovery entry not found")
    writes = [
        store.Write("Delete", pk=item["pk"], sk=item["sk"], condition="attribute_exists(pk)"),
        *(
            store.Write(
                "Delete",
                pk=index_pk,
                sk=index_sk,
                # An index item that is somehow gone must not make its entry unremovable.
                condition="attribute_not_exists(pk) OR entryId = :entry",
                values={":entry": request.entryId},
            )
            for index_pk, index_sk in (index_key(tenant, site, k, v) for k, v in identifiers(item))
        ),
    ]

    # Cancelled on a condition: a concurrent remove got there first.
    _transact(writes, on_condition=lambda _: NotFound("discovery entry not found"))
    return view(item)


def lookup(
    tenant_id: str,
    site_id: str,
    *,
    serial: str | None = None,
    system_uuid: str | None = None,
    macs: Iterable[str] = (),
    fingerprint: str | None = None,
) -> dict[str, Any] | None:
    """The site's entry for a machine reporting these identifiers, or None. One BatchGetItem over
    the candidates' index keys (no call at all when no identifier is usable). Values are
    canonicalised as at registration; malformed values and placeholders are skipped: they match
    nothing, because they could not have been registered.

    Returns `{"entryId", "hostname", "matchedBy": [field, ...], "otherEntryIds": [...]}`. When the
    identifiers point at different entries, the entry matched by the most identifiers wins (then the
    strongest: UUID, serial, fingerprint, MAC) and the others are listed for the attestor to weigh.
    """
    reported: list[tuple[str, str | None]] = [
        ("serial", _canonical(hardware.normalize_serial, serial, hardware.serial_placeholder)),
        ("uuid", _canonical(hardware.normalize_uuid, system_uuid, hardware.uuid_placeholder)),
        *(("mac", _canonical(hardware.normalize_mac, mac, hardware.mac_placeholder)) for mac in macs),
    ]
    if fingerprint is not None and re.fullmatch(FINGERPRINT, fingerprint) and fingerprint.strip():
        reported.append(("fingerprint", fingerprint))
    candidates: dict[tuple[str, str], str] = {}
    for kind, value in reported:
        if value is not None:
            candidates.setdefault(index_key(tenant_id, site_id, kind, value), kind)
    if len(candidates) > MAX_MACS + 3:
        raise InvalidArgument(
            f"too many identifiers to look up: at most {MAX_MACS} MAC addresses",
            [{"field": "macAddresses", "reason": f"at most {MAX_MACS}"}],
        )
    if not candidates:
        return None

    matches: dict[str, set[str]] = {}
    hostnames: dict[str, str | None] = {}
    for key_, index_item in store.batch_get(candidates).items():
        matches.setdefault(index_item["entryId"], set()).add(candidates[key_])
        hostnames[index_item["entryId"]] = index_item.get("hostname")
    if not matches:
        return None
    ranked = sorted(
        matches, key=lambda entry: (-len(matches[entry]), min(_STRENGTH[k] for k in matches[entry]), entry)
    )
    best = ranked[0]
    return {
        "entryId": best,
        "hostname": hostnames[best],
        "matchedBy": [field for kind, field in FIELD_OF.items() if kind in matches[best]],
        "otherEntryIds": ranked[1:],
    }


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
