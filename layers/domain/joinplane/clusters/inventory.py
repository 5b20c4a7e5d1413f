"""Sylve's guest-identity inventory, as a Sylve leader evaluates it for `POST /cluster/accept-join`.

A joining Sylve node submits the VM and jail registrations it holds together with a digest. The
leader recomputes the canonical report from the submitted entries, and then builds one report over
the cluster's registry plus the joiner's entries; any conflict in either report refuses the join.
This module ports that pure logic from Sylve's `internal/services/cluster/guest_identity_inventory.go`
(canonical form, conflicts, digest) and `guest_identity_join*.go` (the merge), keeping Sylve's
reason strings, orderings and digest bytes so a Sylve node cannot tell Joinplane from a Sylve leader.

Go semantics that Python does not share by default are reproduced on purpose:

* `strings.TrimSpace` trims Unicode White_Space only (Python's `str.strip()` also trims U+001C-U+001F).
* `strings.ToLower` maps rune by rune with the simple case mapping (`İ` -> `i`, no final sigma).
* the digest hashes the bytes of Go's `json.Marshal`, reproduced by `go_json_compact`.

Everything here is pure and import-cheap: it runs during a Lambda cold start.
"""

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

GUEST_TYPE_VM = "vm"
GUEST_TYPE_JAIL = "jail"
GUEST_TYPES = frozenset({GUEST_TYPE_VM, GUEST_TYPE_JAIL})

# Sylve's clusterModels.GuestIdentityMaxID and guestIdentityInventoryMaxNodeIDBytes.
GUEST_ID_MAX = 9999
NODE_ID_MAX_BYTES = 128

REASON_INVALID_GUEST_ID = "invalid_guest_id"
REASON_INVALID_GUEST_TYPE = "invalid_guest_type"
REASON_INVALID_NODE_ID = "invalid_node_id"
REASON_SHARED_GUEST_ID = "shared_guest_id"

# Sylve's IDs are Go `uint` (64-bit on its platforms); Go's decoder rejects anything outside it.
_UINT_MAX = 2**64 - 1
GoUint = Annotated[int, Field(strict=True, ge=0, le=_UINT_MAX)]

# unicode.IsSpace, which strings.TrimSpace uses: the Unicode White_Space property.
GO_WHITESPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

# Characters encoding/json never writes raw (escapeHTML is on for json.Marshal), plus lone
# surrogates, the only way a Python str can carry what would be invalid UTF-8 in a Go string.
_GO_JSON_ESCAPED = r'[\x00-\x1f"\\<>&\u2028\u2029\ud800-\udfff]'
_GO_JSON_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_LONE_SURROGATE = r"[\ud800-\udfff]"


def _well_formed(value: str) -> str:
    """Replace lone surrogates with U+FFFD, as Go's JSON decoder does for an unpaired `\\udXXX`
    escape, so every string a model holds is one a Sylve leader could have decoded."""
    if value.isascii():
        return value
    return re.sub(_LONE_SURROGATE, "\ufffd", value)


class _GoWireModel(BaseModel):
    # Validators are built on first use, not at import: the import is every cluster function's
    # cold start (~6 ms for these three models), and a request validates at most one report.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_zero(cls, data: Any) -> Any:
        # Go's decoder leaves a field at its zero value when the JSON says null.
        if isinstance(data, Mapping):
            return {key: value for key, value in data.items() if value is not None}
        return data


class InventoryEntry(_GoWireModel):
    """One durable VM or jail registration. Field order is Sylve's struct order, which is the order
    Go writes them in, so `go_json_compact(entry.model_dump())` is byte-identical to Sylve's output.
    Defaults are Go's zero values: Sylve decodes a missing field as zero and then reports it as a
    conflict instead of rejecting the request."""

    nodeId: StrictStr = ""
    guestType: StrictStr = ""
    guestId: GoUint = 0
    recordId: GoUint = 0
    name: StrictStr = ""

    @field_validator("nodeId", "guestType", "name")
    @classmethod
    def _decode_like_go(cls, value: str) -> str:
        return _well_formed(value)


class InventoryConflict(_GoWireModel):
    guestId: GoUint = 0
    reason: StrictStr = ""
    entries: list[InventoryEntry] = Field(default_factory=list)


class InventoryReport(_GoWireModel):
    entries: list[InventoryEntry] = Field(default_factory=list)
    conflicts: list[InventoryConflict] = Field(default_factory=list)
    digest: StrictStr = ""


EntryInput = InventoryEntry | Mapping[str, Any]


def go_trim_space(value: str) -> str:
    """Go's strings.TrimSpace (Sylve trims node ids, versions and inventory fields with it)."""
    return value.strip(GO_WHITESPACE)


def _go_lower_rune(char: str) -> str:
    if "\ud800" <= char <= "\udfff":
        # strings.Map writes utf8.RuneError for each byte it cannot decode.
        return "\ufffd"
    lowered = char.lower()
    # Python applies the full mapping; the only unconditional multi-character lowercase is
    # U+0130 -> "i\u0307", whose simple (Go) mapping is its first character, "i".
    return lowered if len(lowered) == 1 else lowered[0]


def _go_lower(value: str) -> str:
    if value.isascii():
        return value.lower()
    # Rune by rune, so Python's context-sensitive final-sigma rule never applies.
    return "".join(_go_lower_rune(char) for char in value)


def _entry_sort_key(entry: InventoryEntry) -> tuple[int, str, str, int, str]:
    # Sylve compares strings with strings.Compare (bytes); for well-formed text, code point order
    # is UTF-8 byte order, so Python's str ordering agrees.
    return (entry.guestId, entry.nodeId, entry.guestType, entry.recordId, entry.name)


def _as_entry(entry: EntryInput) -> InventoryEntry:
    if isinstance(entry, InventoryEntry):
        return entry
    return InventoryEntry.model_validate(entry)


def canonicalize(entries: Iterable[EntryInput]) -> list[InventoryEntry]:
    """Sylve's canonical form: node ID and name trimmed, guest type trimmed then lowercased, sorted
    by guestId, nodeId, guestType, recordId, name. Returns new entries; the input is untouched.
    Idempotent, so every function below accepts raw or canonical entries alike."""
    normalized = []
    for raw in entries:
        entry = _as_entry(raw)
        # model_construct: every value comes from a validated entry and trimming or lowering
        # well-formed text keeps it well formed, so validating again would only cost cold-start time.
        normalized.append(
            InventoryEntry.model_construct(
                nodeId=go_trim_space(entry.nodeId),
                guestType=_go_lower(go_trim_space(entry.guestType)),
                guestId=entry.guestId,
                recordId=entry.recordId,
                name=go_trim_space(entry.name),
            )
        )
    # list.sort is stable like Sylve's sort.SliceStable; the key covers every field anyway.
    normalized.sort(key=_entry_sort_key)
    return normalized


def _entry_reasons(entry: InventoryEntry) -> list[str]:
    # Sylve checks guest ID, then type, then node, and an entry may fail all three at once.
    reasons = []
    if entry.guestId == 0 or entry.guestId > GUEST_ID_MAX:
        reasons.append(REASON_INVALID_GUEST_ID)
    if entry.guestType not in GUEST_TYPES:
        reasons.append(REASON_INVALID_GUEST_TYPE)
    # Bytes, not characters, as Go's len(); "replace" only matters for unvalidated lone surrogates.
    if entry.nodeId == "" or len(entry.nodeId.encode("utf-8", "replace")) > NODE_ID_MAX_BYTES:
        reasons.append(REASON_INVALID_NODE_ID)
    return reasons


def _conflict_sort_key(
    conflict: InventoryConflict,
) -> tuple[int, str, list[tuple[int, str, str, int, str]]]:
    # Sylve orders by guest ID, reason, then the entry lists element by element with a shorter
    # list first when one is a prefix of the other: exactly Python's list comparison.
    return (conflict.guestId, conflict.reason, [_entry_sort_key(entry) for entry in conflict.entries])


def find_conflicts(entries: Iterable[EntryInput]) -> list[InventoryConflict]:
    """Every invariant violation in the canonical inventory, in Sylve's order.

    A per-entry conflict (`invalid_guest_id`, `invalid_guest_type`, `invalid_node_id`) holds just
    that one canonical entry. `shared_guest_id` holds every entry with that guest ID, in canonical
    order, whatever their types or nodes: VMs and jails share one ID namespace across the cluster.
    Invalid entries are not dropped first, so an out-of-range ID can be both invalid and shared.
    """
    return _conflicts_of(canonicalize(entries))


def _conflicts_of(canonical: list[InventoryEntry]) -> list[InventoryConflict]:
    conflicts = [
        InventoryConflict(guestId=entry.guestId, reason=reason, entries=[entry])
        for entry in canonical
        for reason in _entry_reasons(entry)
    ]
    start = 0
    while start < len(canonical):
        end = start + 1
        while end < len(canonical) and canonical[end].guestId == canonical[start].guestId:
            end += 1
        if end - start > 1:
            conflicts.append(
                InventoryConflict(
                    guestId=canonical[start].guestId,
                    reason=REASON_SHARED_GUEST_ID,
                    entries=list(canonical[start:end]),
                )
            )
        start = end
    conflicts.sort(key=_conflict_sort_key)
    return conflicts


def _go_json_escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _GO_JSON_SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    if "\ud800" <= char <= "\udfff":
        # A lone surrogate stands for one byte of invalid UTF-8 (the surrogateescape convention);
        # Go 1.25's encoder writes each such byte as the escape \ufffd.
        return "\\ufffd"
    return f"\\u{ord(char):04x}"


def _go_json_string(value: str) -> str:
    return '"' + re.sub(_GO_JSON_ESCAPED, _go_json_escape, value) + '"'


def _go_json_parts(value: object, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_go_json_string(value))
    elif value is None:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, BaseModel):
        _go_json_parts(value.model_dump(), out)
    elif isinstance(value, Mapping):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"go_json_compact: object keys must be str, not {type(key).__name__}")
            if index:
                out.append(",")
            out.append(_go_json_string(key))
            out.append(":")
            _go_json_parts(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _go_json_parts(item, out)
        out.append("]")
    else:
        raise TypeError(f"go_json_compact: unsupported type {type(value).__name__}")


def go_json_compact(value: object) -> bytes:
    """The bytes Go 1.25's `json.Marshal` writes for `value`, for the shapes Sylve hashes and serves.

    A mapping stands for a Go struct: keys are written in the mapping's order (Go writes struct
    fields in declaration order; it sorts only real Go maps). Pydantic models are dumped first,
    so a report encodes in Sylve's field order. Strings follow encoding/json: `<`, `>`, `&`, U+2028
    and U+2029 become \\u escapes; `"` `\\` \\b \\f \\n \\r \\t get short escapes; other bytes below
    0x20 become lowercase \\u00XX; DEL and every other character are raw UTF-8. Floats are not
    supported: nothing Sylve hashes has one.
    """
    parts: list[str] = []
    _go_json_parts(value, parts)
    return "".join(parts).encode("utf-8")


def digest(entries: Iterable[EntryInput]) -> str:
    """Sylve's inventory digest: hex SHA-256 of Go's JSON for `[{nodeId, guestType, guestId}, ...]`
    over ALL canonical entries, invalid ones included (Sylve hashes before and independently of
    the conflict check), so record IDs and names never change it but ordering and padding cannot
    either."""
    return _digest_of(canonicalize(entries))


def _digest_of(canonical: list[InventoryEntry]) -> str:
    identities = [
        {"nodeId": entry.nodeId, "guestType": entry.guestType, "guestId": entry.guestId}
        for entry in canonical
    ]
    return hashlib.sha256(go_json_compact(identities)).hexdigest()


def build_report(entries: Iterable[EntryInput]) -> InventoryReport:
    """Sylve's BuildGuestIdentityInventoryReport: canonical entries, their conflicts, their digest.
    A Sylve leader rebuilds the joiner's report this way and compares only the digest with the one
    submitted; the submitted conflicts are never trusted."""
    canonical = canonicalize(entries)
    return InventoryReport(
        entries=canonical, conflicts=_conflicts_of(canonical), digest=_digest_of(canonical)
    )


def merge(
    joiner: InventoryReport | Iterable[EntryInput],
    registry: Iterable[EntryInput],
    *,
    exclude_node_id: str | None = None,
) -> InventoryReport:
    """The leader's combined view: the registry's entries plus the joiner's, rebuilt as one report.

    Sylve does not diff the two sides; it concatenates the entries and runs the ordinary report
    builder, so a clash surfaces as a normal conflict, typically `shared_guest_id` holding the
    registry entry and the joiner's entry side by side (registry claims carry recordId 0 and an
    empty name). Only the joiner's entries are used from a report: its digest and conflicts are
    rebuilt. With `exclude_node_id`, registry entries already owned by that (trimmed) node are
    left out, as Sylve does when the joiner's own earlier claims must not clash with themselves;
    by default, as in Sylve's conflict report, nothing is excluded.
    """
    joiner_entries = joiner.entries if isinstance(joiner, InventoryReport) else list(joiner)
    excluded = None if exclude_node_id is None else go_trim_space(exclude_node_id)
    combined: list[InventoryEntry] = []
    for raw in registry:
        entry = _as_entry(raw)
        if excluded is not None and go_trim_space(entry.nodeId) == excluded:
            continue
        combined.append(entry)
    combined.extend(_as_entry(entry) for entry in joiner_entries)
    return build_report(combined)
