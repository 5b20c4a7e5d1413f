"""Sylve guest-identity inventory: canonical form, conflicts, digest and the leader's merge.

Expectations come from Sylve's own tests (internal/services/cluster/guest_identity_inventory_test.go
and guest_identity_join_test.go) and from vectors/digest_vectors.json, which real Go printed.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from joinplane.clusters.inventory import (
    GUEST_ID_MAX,
    REASON_INVALID_GUEST_ID,
    REASON_INVALID_GUEST_TYPE,
    REASON_INVALID_NODE_ID,
    REASON_SHARED_GUEST_ID,
    InventoryConflict,
    InventoryEntry,
    InventoryReport,
    build_report,
    canonicalize,
    digest,
    find_conflicts,
    go_json_compact,
    merge,
)

VECTORS = json.loads((Path(__file__).parent / "vectors" / "digest_vectors.json").read_text("utf-8"))


def entry(node: str, kind: str, guest_id: int, record_id: int = 1, name: str = "") -> InventoryEntry:
    return InventoryEntry(nodeId=node, guestType=kind, guestId=guest_id, recordId=record_id, name=name)


def reasons(conflicts: list[InventoryConflict]) -> list[tuple[int, str]]:
    return [(conflict.guestId, conflict.reason) for conflict in conflicts]


def sha256_hex(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def vector_node_id(item: dict[str, Any]) -> str:
    # Invalid UTF-8 travels as hex; surrogateescape is the Python spelling of a Go string's raw bytes.
    if "nodeIdHex" in item:
        return bytes.fromhex(item["nodeIdHex"]).decode("utf-8", "surrogateescape")
    return str(item["nodeId"])


# --- canonicalisation -------------------------------------------------------------------------


def test_canonicalize_trims_lowercases_and_sorts_like_sylve() -> None:
    # Given Sylve's insertion-order test data, padded and mixed-case
    raw = [
        {"nodeId": " node-b ", "guestType": " JAIL ", "guestId": 20, "recordId": 4, "name": " jail-20 "},
        {"nodeId": "node-a", "guestType": "vm", "guestId": 10, "recordId": 2, "name": "vm-10"},
        {"nodeId": "node-c", "guestType": "VM", "guestId": 20, "recordId": 1, "name": "vm-20"},
    ]

    # When it is canonicalised
    canonical = canonicalize(raw)

    # Then padding is gone, types are lowercase and order is guestId then nodeId
    assert canonical == [
        entry("node-a", "vm", 10, 2, "vm-10"),
        entry("node-b", "jail", 20, 4, "jail-20"),
        entry("node-c", "vm", 20, 1, "vm-20"),
    ]


def test_canonicalize_is_independent_of_insertion_order_and_leaves_input_untouched() -> None:
    # Given the same entries in two orders, one of them padded
    padded = entry(" node-b ", " JAIL ", 20, 4, " jail-20 ")
    entries = [padded, entry("node-a", "vm", 10, 2), entry("node-c", "VM", 20, 1)]

    # When both orders are reported
    forward = build_report(entries)
    backward = build_report(list(reversed(entries)))

    # Then the reports are byte-identical and the caller's entry was not normalised in place
    assert go_json_compact(forward) == go_json_compact(backward)
    assert padded.nodeId == " node-b " and padded.guestType == " JAIL "


def test_canonicalize_breaks_ties_on_record_id_then_name() -> None:
    # Given entries equal on guestId, nodeId and guestType
    entries = [entry("n", "vm", 5, 2, "a"), entry("n", "vm", 5, 1, "z"), entry("n", "vm", 5, 1, "b")]

    # When they are canonicalised
    canonical = canonicalize(entries)

    # Then recordId decides first and name last
    assert [(e.recordId, e.name) for e in canonical] == [(1, "b"), (1, "z"), (2, "a")]


def test_canonicalize_trims_only_what_go_trims() -> None:
    # Given padding Go treats as space (NBSP, IDEOGRAPHIC SPACE) and padding it does not (U+001F)
    entries = [entry("\u3000node-a\u00a0", "vm", 1), entry("\x1fnode-b\x1f", "vm", 2)]

    # When they are canonicalised
    canonical = canonicalize(entries)

    # Then only Unicode White_Space is trimmed, unlike Python's str.strip()
    assert [e.nodeId for e in canonical] == ["node-a", "\x1fnode-b\x1f"]


def test_canonicalize_lowercases_rune_by_rune_like_go() -> None:
    # Given guest types whose Python full-case lowering differs from Go's simple mapping
    entries = [entry("n", "JA\u0130L", 1), entry("n", "\u03a3\u0391\u03a3", 2)]

    # When they are canonicalised
    canonical = canonicalize(entries)

    # Then İ lowers to plain i (a valid jail for Sylve) and no final sigma appears
    assert [e.guestType for e in canonical] == ["jail", "\u03c3\u03b1\u03c3"]
    assert find_conflicts(canonical) == [
        InventoryConflict(guestId=2, reason=REASON_INVALID_GUEST_TYPE, entries=[canonical[1]])
    ]


def test_canonicalize_is_idempotent() -> None:
    # Given an already canonical inventory
    once = canonicalize([entry(" b ", " VM ", 3, 1, " x "), entry("a", "Jail", 3)])

    # When it is canonicalised again
    twice = canonicalize(once)

    # Then nothing changes
    assert twice == once


@pytest.mark.parametrize("vector", VECTORS["canonicalVectors"], ids=lambda v: v["name"])
def test_canonical_form_matches_go(vector: dict[str, Any]) -> None:
    # Given raw entries that Go normalised with strings.TrimSpace/ToLower and sorted
    raw = vector["entries"]

    # When Python canonicalises and reports them
    canonical = canonicalize(raw)
    report = build_report(raw)

    # Then entries, their Go JSON and the digest are Go's, byte for byte
    assert [e.model_dump() for e in canonical] == vector["canonical"]
    assert go_json_compact(canonical) == vector["canonicalJson"].encode("utf-8")
    assert report.digest == vector["sha256"]


# --- wire models ------------------------------------------------------------------------------


def test_entry_rejects_unknown_fields() -> None:
    # Given an entry with a field Sylve's contract does not have
    payload = {"nodeId": "n", "guestType": "vm", "guestId": 1, "recordId": 1, "name": "x", "extra": 1}

    # When it is validated / Then it is refused
    with pytest.raises(ValidationError):
        InventoryEntry.model_validate(payload)


@pytest.mark.parametrize("guest_id", ["7", -1, 2**64, 1.5, True])
def test_entry_ids_decode_like_go_uint(guest_id: object) -> None:
    # Given a guestId Go's decoder would refuse for a uint field
    payload = {"nodeId": "n", "guestType": "vm", "guestId": guest_id}

    # When it is validated / Then it is refused rather than coerced
    with pytest.raises(ValidationError):
        InventoryEntry.model_validate(payload)


def test_missing_and_null_fields_become_go_zero_values_and_then_conflicts() -> None:
    # Given an entry Go would decode to all zero values
    raw = InventoryEntry.model_validate_json('{"nodeId": null, "guestId": null}')

    # When it is reported
    report = build_report([raw])

    # Then Sylve's three per-entry reasons are raised, in its order, each holding that one entry
    assert raw == InventoryEntry()
    assert reasons(report.conflicts) == [
        (0, REASON_INVALID_GUEST_ID),
        (0, REASON_INVALID_GUEST_TYPE),
        (0, REASON_INVALID_NODE_ID),
    ]
    assert all(conflict.entries == [raw] for conflict in report.conflicts)


def test_lone_surrogates_decode_to_replacement_character_like_go() -> None:
    # Given a body Python's json module decodes with an unpaired surrogate escape
    payload = json.loads('{"nodeId": "node-\\ud800", "guestType": "vm", "guestId": 1}')

    # When it is validated
    decoded = InventoryEntry.model_validate(payload)

    # Then it holds U+FFFD, as Go's decoder would, and hashes as raw UTF-8
    assert decoded.nodeId == "node-\ufffd"
    assert digest([decoded]) == digest([entry("node-\ufffd", "vm", 1)])


def test_report_round_trips_through_go_json() -> None:
    # Given a report with conflicts
    report = build_report([entry("a", "vm", 4), entry("b", "jail", 4), entry("", "vm", 0)])

    # When it is encoded as Go would and decoded again
    decoded = InventoryReport.model_validate_json(go_json_compact(report))

    # Then nothing is lost
    assert decoded == report


# --- conflicts --------------------------------------------------------------------------------


def test_clean_inventory_has_no_conflicts() -> None:
    # Given one vm and one jail with distinct valid IDs, including the bounds
    entries = [entry("node-a", "vm", 1), entry("node-a", "jail", GUEST_ID_MAX)]

    # When conflicts are sought / Then there are none
    assert find_conflicts(entries) == []


@pytest.mark.parametrize("guest_id", [0, GUEST_ID_MAX + 1, 2**64 - 1])
def test_invalid_guest_id(guest_id: int) -> None:
    # Given an ID outside 1..9999
    bad = entry("node-a", "vm", guest_id)

    # When conflicts are sought
    conflicts = find_conflicts([bad])

    # Then exactly one invalid_guest_id conflict holds the entry
    assert conflicts == [InventoryConflict(guestId=guest_id, reason=REASON_INVALID_GUEST_ID, entries=[bad])]


@pytest.mark.parametrize("kind", ["container", "", "bhyve", "v m"])
def test_invalid_guest_type(kind: str) -> None:
    # Given a guest type that is neither vm nor jail after normalisation
    bad = entry("node-a", kind, 9)

    # When conflicts are sought / Then one invalid_guest_type conflict is reported
    assert reasons(find_conflicts([bad])) == [(9, REASON_INVALID_GUEST_TYPE)]


@pytest.mark.parametrize(
    ("node_id", "invalid"),
    [("", True), (" \t ", True), ("x" * 128, False), ("x" * 129, True), ("é" * 64, False), ("é" * 65, True)],
)
def test_invalid_node_id_counts_utf8_bytes(node_id: str, invalid: bool) -> None:
    # Given a node ID that is empty, blank, or near the 128-byte limit in one- or two-byte characters
    candidate = entry(node_id, "vm", 9)

    # When conflicts are sought
    found = reasons(find_conflicts([candidate]))

    # Then the limit is on UTF-8 bytes, after trimming
    assert found == ([(9, REASON_INVALID_NODE_ID)] if invalid else [])


def test_shared_guest_id_within_one_node_spans_vm_and_jail() -> None:
    # Given a vm and a jail that share an ID on one node (Sylve's local-scan test)
    entries = [entry("node-a", "vm", 100, 1, "vm-100"), entry("node-a", "jail", 100, 1, "jail-100")]

    # When conflicts are sought
    conflicts = find_conflicts(entries)

    # Then one shared_guest_id conflict lists both, jail before vm (canonical order)
    assert reasons(conflicts) == [(100, REASON_SHARED_GUEST_ID)]
    assert [e.guestType for e in conflicts[0].entries] == ["jail", "vm"]


def test_shared_guest_id_across_nodes_lists_entries_in_canonical_order() -> None:
    # Given the same ID on two nodes, submitted node-b first
    entries = [entry("node-b", "vm", 101, 8, "vm-b"), entry("node-a", "vm", 101, 3, "vm-a")]

    # When conflicts are sought
    conflicts = find_conflicts(entries)

    # Then the group is ordered node-a, node-b
    assert reasons(conflicts) == [(101, REASON_SHARED_GUEST_ID)]
    assert [e.nodeId for e in conflicts[0].entries] == ["node-a", "node-b"]


def test_shared_guest_id_groups_every_holder_including_invalid_ones() -> None:
    # Given three holders of ID 0, which is itself invalid
    entries = [entry("c", "vm", 0), entry("a", "vm", 0), entry("b", "bogus", 0)]

    # When conflicts are sought
    conflicts = find_conflicts(entries)

    # Then invalid entries are not dropped: each is reported, and all three share the ID
    assert reasons(conflicts) == [
        (0, REASON_INVALID_GUEST_ID),
        (0, REASON_INVALID_GUEST_ID),
        (0, REASON_INVALID_GUEST_ID),
        (0, REASON_INVALID_GUEST_TYPE),
        (0, REASON_SHARED_GUEST_ID),
    ]
    assert [c.entries[0].nodeId for c in conflicts[:3]] == ["a", "b", "c"]
    assert [e.nodeId for e in conflicts[-1].entries] == ["a", "b", "c"]


def test_conflicts_are_ordered_by_guest_id_then_reason_then_entries() -> None:
    # Given conflicts spread over several IDs and reasons, submitted out of order
    entries = [
        entry("node-z", "vm", 300),
        entry("node-a", "vm", 300),
        entry("", "vm", 20),
        entry("node-a", "vm", 10000),
        entry("node-b", "lxc", 20),
    ]

    # When conflicts are sought
    conflicts = find_conflicts(entries)

    # Then they follow guestId, then reason, then the entries themselves
    assert reasons(conflicts) == [
        (20, REASON_INVALID_GUEST_TYPE),
        (20, REASON_INVALID_NODE_ID),
        (20, REASON_SHARED_GUEST_ID),
        (300, REASON_SHARED_GUEST_ID),
        (10000, REASON_INVALID_GUEST_ID),
    ]


def test_out_of_range_id_and_oversized_node_are_both_reported() -> None:
    # Given Sylve's out-of-range case: ID 10000 on a 129-byte node ID
    bad = entry("\x00" * 129, "vm", 10000, 1, "bad-range")

    # When conflicts are sought / Then the ID and the node are both invalid, in that order
    assert reasons(find_conflicts([bad])) == [
        (10000, REASON_INVALID_GUEST_ID),
        (10000, REASON_INVALID_NODE_ID),
    ]


# --- digest -----------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["digestVectors"], ids=lambda v: v["name"])
def test_digest_vectors_match_go(vector: dict[str, Any]) -> None:
    # Given identities Go marshalled and hashed
    identities = [
        {"nodeId": vector_node_id(item), "guestType": item["guestType"], "guestId": item["guestId"]}
        for item in vector["entries"]
    ]

    # When Python encodes them
    raw = go_json_compact(identities)

    # Then the bytes and the hash are Go's
    assert raw == vector["json"].encode("utf-8")
    assert sha256_hex(raw) == vector["sha256"]


@pytest.mark.parametrize(
    "vector",
    [v for v in VECTORS["digestVectors"] if not any("nodeIdHex" in item for item in v["entries"])],
    ids=lambda v: v["name"],
)
def test_digest_function_matches_go_vectors(vector: dict[str, Any]) -> None:
    # Given a vector whose entries are already canonical, well-formed text
    entries = [InventoryEntry.model_validate(item) for item in vector["entries"]]
    assert canonicalize(entries) == entries

    # When the digest is computed / Then it is the one Go printed
    assert digest(entries) == vector["sha256"]


def test_vectors_came_from_a_go_125_compatible_encoder() -> None:
    # Given the vector file / Then it was printed by the classic encoding/json Sylve's Go 1.25 uses
    assert VECTORS["goVersion"].startswith("go1.")
    assert len(VECTORS["digestVectors"]) >= 10
    assert all(v["origin"] and v["sha256"] for v in VECTORS["digestVectors"])


def test_digest_of_empty_inventory_hashes_an_empty_array() -> None:
    # Given no entries / When hashed / Then the digest is that of "[]", never of "null"
    assert digest([]) == sha256_hex(b"[]") == build_report([]).digest


def test_digest_ignores_record_id_and_name() -> None:
    # Given the same guest before and after a rename and re-registration
    before = [entry("node-a", "vm", 10, 1, "before")]
    after = [entry("node-a", "vm", 10, 99, "after")]

    # When both are reported
    first, second = build_report(before), build_report(after)

    # Then the identity digest is unchanged although the reports differ
    assert first.digest == second.digest
    assert go_json_compact(first) != go_json_compact(second)


def test_digest_covers_invalid_entries_after_normalisation() -> None:
    # Given an inventory with an invalid entry, padded
    entries = [entry(" node-a ", " VM ", 5), entry("node-a", "container", 0)]

    # When it is hashed
    value = digest(entries)

    # Then every canonical entry is in the hashed JSON, the invalid one included
    expected = (
        b'[{"nodeId":"node-a","guestType":"container","guestId":0},'
        b'{"nodeId":"node-a","guestType":"vm","guestId":5}]'
    )
    assert value == sha256_hex(expected)


# --- Go-compatible encoder ---------------------------------------------------------------------


def test_go_json_compact_keeps_struct_field_order_and_scalars() -> None:
    # Given a struct-like mapping whose keys are not sorted
    value = {"z": [1, True, False, None], "a": {"nested": "x"}, "m": []}

    # When it is encoded / Then key order is kept and output is compact
    assert go_json_compact(value) == b'{"z":[1,true,false,null],"a":{"nested":"x"},"m":[]}'


def test_go_json_compact_escapes_keys_like_values() -> None:
    # Given a key that needs escaping / Then it is escaped by the same rules as values
    assert go_json_compact({"<k>": "&"}) == b'{"\\u003ck\\u003e":"\\u0026"}'


def test_go_json_compact_writes_a_lone_surrogate_as_one_invalid_byte() -> None:
    # Given the surrogateescape spelling of the bytes b"a\xffb"
    value = b"a\xffb".decode("utf-8", "surrogateescape")

    # When encoded / Then Go 1.25's escape for an invalid byte is written
    assert go_json_compact(value) == b'"a\\ufffdb"'


@pytest.mark.parametrize("value", [1.5, {1: "x"}, {"a": object()}])
def test_go_json_compact_refuses_unsupported_values(value: object) -> None:
    # Given a value outside the supported subset / Then it is refused, not guessed at
    with pytest.raises(TypeError):
        go_json_compact(value)


# --- merge ------------------------------------------------------------------------------------


def test_merge_of_disjoint_inventories_is_clean() -> None:
    # Given a registry holding the leader's vm 500 and a joiner holding jail 501
    registry = [InventoryEntry(nodeId="leader", guestType="vm", guestId=500)]
    joiner = build_report([entry("joiner", "jail", 501, 7, "joiner-jail")])

    # When the leader merges them
    merged = merge(joiner, registry)

    # Then the combined report is clean, sorted, and hashed over both sides
    assert merged.conflicts == []
    assert [(e.nodeId, e.guestId) for e in merged.entries] == [("leader", 500), ("joiner", 501)]
    assert merged.digest == digest(registry + joiner.entries)


def test_merge_reports_a_guest_id_held_by_registry_and_joiner() -> None:
    # Given the leader's vm 200 in the registry and a joining node's jail 200 (Sylve's preflight test)
    registry = [InventoryEntry(nodeId="leader-node", guestType="vm", guestId=200)]
    joiner = build_report([entry("joining-node", "jail", 200, 1, "joiner-jail")])

    # When the leader merges them
    merged = merge(joiner, registry)

    # Then one shared_guest_id conflict shows both holders in canonical order
    assert merged.conflicts == [
        InventoryConflict(
            guestId=200,
            reason=REASON_SHARED_GUEST_ID,
            entries=[
                InventoryEntry(
                    nodeId="joining-node", guestType="jail", guestId=200, recordId=1, name="joiner-jail"
                ),
                InventoryEntry(nodeId="leader-node", guestType="vm", guestId=200, recordId=0, name=""),
            ],
        )
    ]


def test_merge_rebuilds_the_joiner_report_instead_of_trusting_it() -> None:
    # Given a joiner report whose digest and conflicts were tampered with
    honest = build_report([entry("joiner", "vm", 7)])
    tampered = honest.model_copy(update={"digest": "0" * 64, "conflicts": []})

    # When merged with an empty registry
    merged = merge(tampered, [])

    # Then the report is recomputed from the entries alone
    assert merged == honest


def test_merge_accepts_raw_joiner_entries_and_keeps_per_entry_conflicts() -> None:
    # Given raw joiner entries, one of them invalid, and a registry entry from another node
    joiner: list[dict[str, Any]] = [
        {"nodeId": " joiner ", "guestType": "VM", "guestId": 12},
        {"nodeId": "joiner", "guestType": "vm"},
    ]
    registry = [{"nodeId": "member", "guestType": "jail", "guestId": 13}]

    # When merged
    merged = merge(joiner, registry)

    # Then the joiner's invalid entry is reported like any other
    assert reasons(merged.conflicts) == [(0, REASON_INVALID_GUEST_ID)]
    assert [e.nodeId for e in merged.entries] == ["joiner", "joiner", "member"]


def test_merge_can_exclude_the_joiners_own_registry_claims() -> None:
    # Given a registry that already holds the joiner's claim from an earlier, interrupted join
    registry = [
        InventoryEntry(nodeId="member", guestType="vm", guestId=1),
        InventoryEntry(nodeId=" joiner ", guestType="jail", guestId=2),
    ]
    joiner = build_report([entry("joiner", "jail", 2, 5, "j")])

    # When merged with and without excluding the joiner's own claims
    excluded = merge(joiner, registry, exclude_node_id="joiner")
    included = merge(joiner, registry)

    # Then exclusion yields a clean report, while the default shows the self-clash Sylve reports
    assert excluded.conflicts == []
    assert reasons(included.conflicts) == [(2, REASON_SHARED_GUEST_ID)]
    assert [e.recordId for e in included.conflicts[0].entries] == [0, 5]


def test_merge_does_not_mutate_its_inputs() -> None:
    # Given a padded registry entry and a joiner report
    registry = [InventoryEntry(nodeId=" member ", guestType=" VM ", guestId=3)]
    joiner = build_report([entry("joiner", "vm", 4)])
    snapshot = (registry[0].model_copy(), joiner.model_copy(deep=True))

    # When merged
    merge(joiner, registry)

    # Then neither input changed
    assert (registry[0], joiner) == snapshot
