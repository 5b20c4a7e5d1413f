"""The discovery inventory: its routes through the real authorizer and handler, the attestor's
lookup, and a race on one identifier."""

from __future__ import annotations

from typing import Any

import pytest

from joinplane import clock, discovery, keyauth
from joinplane.dal import discovery as discovery_db
from joinplane.dal import dynamo
from joinplane.errors import AlreadyExists, JoinplaneError
from joinplane_local.seed import install_admin_key
from tests.support import release_together
from tests.support.attestation import call, dynamodb_calls, make_key, make_site
from tests.support.table import all_items

REGISTER, LIST, REMOVE = (f"/api/compute/discovery/{verb}" for verb in ("register", "list", "remove"))
SITE = {"tenantId": "acme", "siteId": "site-a"}
MACHINE = {
    **SITE,
    "serialNumber": " pf2abcde ",
    "systemUuid": "{226E380E-67D1-4214-9868-5383A79AF0B8}",
    "macAddresses": ["AA-BB-CC-DD-EE-F0", "aabbccddeef1"],
    "machineFingerprint": "fp:sha256:Zm9vYmFy",
    "hostname": "gpu-07.rack-3",
    "description": "rack 3, slot 7",
}


def discovery_items() -> list[dict[str, Any]]:
    return [item for item in all_items() if item["pk"].endswith("#DISCOVERY")]


# --- register / list / remove ---------------------------------------------------------------


def test_register_canonicalises_and_indexes_every_identifier(site_a: str) -> None:
    # When a machine is registered with identifiers spelled as tools print them
    reply = call(REGISTER, MACHINE, site_a)
    # Then the entry holds their canonical forms
    assert reply.status == 200, reply.body
    entry = reply.body
    assert entry["entryId"].startswith("disc_") and len(entry["entryId"]) == 31
    assert entry["serialNumber"] == "PF2ABCDE"
    assert entry["systemUuid"] == "226e380e-67d1-4214-9868-5383a79af0b8"
    assert entry["macAddresses"] == ["aa:bb:cc:dd:ee:f0", "aa:bb:cc:dd:ee:f1"]
    assert entry["machineFingerprint"] == "fp:sha256:Zm9vYmFy"
    assert entry["hostname"] == "gpu-07.rack-3" and entry["description"] == "rack 3, slot 7"
    assert entry["createdAt"].endswith("Z") and entry["createdBy"].startswith("key_")
    # And one index item per identifier sits beside it, pointing back at it
    pk = "SITE#acme#site-a#DISCOVERY"
    stored = {item["sk"]: item for item in discovery_items()}
    assert set(stored) == {
        f"ENTRY#{entry['entryId']}",
        "ID#serial#PF2ABCDE",
        "ID#uuid#226e380e-67d1-4214-9868-5383a79af0b8",
        "ID#mac#aa:bb:cc:dd:ee:f0",
        "ID#mac#aa:bb:cc:dd:ee:f1",
        "ID#fingerprint#fp:sha256:Zm9vYmFy",
    }
    assert all(item["pk"] == pk for item in stored.values())
    index = stored["ID#serial#PF2ABCDE"]
    assert index["entryId"] == entry["entryId"] and index["hostname"] == "gpu-07.rack-3"


def test_one_identifier_is_enough_and_repeated_macs_are_kept_once(site_a: str) -> None:
    reply = call(REGISTER, {**SITE, "macAddresses": ["aa:bb:cc:dd:ee:f0", "AA-BB-CC-DD-EE-F0"]}, site_a)
    assert reply.status == 200, reply.body
    assert reply.body["macAddresses"] == ["aa:bb:cc:dd:ee:f0"] and reply.body["serialNumber"] is None
    assert len(discovery_items()) == 2


def test_list_pages_oldest_first(site_a: str) -> None:
    registered = []
    for index in range(5):
        registered.append(call(REGISTER, {**SITE, "serialNumber": f"SN-{index}"}, site_a).body["entryId"])
        clock.advance(1)
    first = call(LIST, {**SITE, "limit": 2}, site_a)
    assert first.status == 200
    assert [e["entryId"] for e in first.body["entries"]] == registered[:2]
    second = call(LIST, {**SITE, "limit": 2, "cursor": first.body["nextCursor"]}, site_a)
    assert [e["entryId"] for e in second.body["entries"]] == registered[2:4]
    rest = call(LIST, {**SITE, "cursor": second.body["nextCursor"]}, site_a)
    assert [e["entryId"] for e in rest.body["entries"]] == registered[4:]
    assert "nextCursor" not in rest.body
    # The index items never show as entries
    whole = call(LIST, SITE, site_a).body
    assert [e["entryId"] for e in whole["entries"]] == registered and "nextCursor" not in whole


def test_list_of_an_empty_site_is_empty(site_a: str) -> None:
    assert call(LIST, SITE, site_a).body == {"entries": []}


def test_remove_deletes_the_entry_and_frees_its_identifiers(site_a: str) -> None:
    entry = call(REGISTER, MACHINE, site_a).body
    other = call(REGISTER, {**SITE, "serialNumber": "OTHER-1"}, site_a).body
    # When it is removed
    removed = call(REMOVE, {**SITE, "entryId": entry["entryId"]}, site_a)
    # Then the reply is the entry as it was, and nothing of it is left
    assert removed.status == 200 and removed.body == entry
    assert {item["sk"] for item in discovery_items()} == {
        f"ENTRY#{other['entryId']}",
        "ID#serial#OTHER-1",
    }
    assert discovery.lookup("acme", "site-a", serial="PF2ABCDE") is None
    # Removing it again is NOT_FOUND
    again = call(REMOVE, {**SITE, "entryId": entry["entryId"]}, site_a)
    assert (again.status, again.code) == (404, "NOT_FOUND")
    # And its identifiers can be registered again
    assert call(REGISTER, MACHINE, site_a).status == 200


def test_removing_an_unknown_entry_is_not_found_and_changes_nothing(site_a: str) -> None:
    call(REGISTER, MACHINE, site_a)
    before = all_items()
    reply = call(REMOVE, {**SITE, "entryId": "disc_" + "0" * 26}, site_a)
    assert (reply.status, reply.code) == (404, "NOT_FOUND")
    assert all_items() == before


# --- duplicates -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clash", "field"),
    [
        ({"serialNumber": "PF2ABCDE"}, "serialNumber"),
        ({"serialNumber": "pf2abcde "}, "serialNumber"),
        ({"systemUuid": "226e380e67d1421498685383a79af0b8"}, "systemUuid"),
        ({"macAddresses": ["aa:bb:cc:dd:ee:99", "AA:BB:CC:DD:EE:F1"]}, "macAddresses"),
        ({"machineFingerprint": "fp:sha256:Zm9vYmFy"}, "machineFingerprint"),
    ],
)
def test_an_identifier_registered_at_the_site_is_already_exists_and_nothing_is_written(
    site_a: str, clash: dict[str, Any], field: str
) -> None:
    # Given a registered machine
    first = call(REGISTER, MACHINE, site_a).body
    before = all_items()
    # When another entry claims one of its identifiers (spelled differently), with a fresh one too
    reply = call(REGISTER, {**SITE, "hostname": "intruder", **clash}, site_a)
    # Then it is refused, naming the field and the entry holding it, and nothing is written
    assert (reply.status, reply.code) == (409, "ALREADY_EXISTS"), reply.body
    assert [d["field"] for d in reply.body["error"]["details"]] == [field]
    assert first["entryId"] in reply.body["error"]["details"][0]["reason"]
    assert reply.body["error"]["message"].startswith(field)
    assert all_items() == before


def test_every_clashing_identifier_is_named(site_a: str) -> None:
    call(REGISTER, MACHINE, site_a)
    before = all_items()
    reply = call(
        REGISTER, {**SITE, "serialNumber": "PF2ABCDE", "macAddresses": ["aa:bb:cc:dd:ee:f0"]}, site_a
    )
    assert reply.code == "ALREADY_EXISTS"
    assert [d["field"] for d in reply.body["error"]["details"]] == ["serialNumber", "macAddresses"]
    assert all_items() == before


def test_the_same_identifier_may_be_registered_at_another_site(site_a: str) -> None:
    make_site(site_a, "site-b")
    assert call(REGISTER, MACHINE, site_a).status == 200
    assert call(REGISTER, {**MACHINE, "siteId": "site-b"}, site_a).status == 200


# --- isolation ------------------------------------------------------------------------------


def test_a_site_key_sees_its_site_only(admin_key: str) -> None:
    # Given sites a and b of acme, a site of globex, and a key managing site a's inventory
    make_site(admin_key, "site-a")
    make_site(admin_key, "site-b")
    make_site(admin_key, "site-z", tenant="globex")
    manager = make_key(admin_key, "compute:discovery:*@site/site-a")
    entry_b = call(REGISTER, {**MACHINE, "siteId": "site-b"}, admin_key).body

    # Then it registers, lists and removes at site a
    entry = call(REGISTER, MACHINE, manager)
    assert entry.status == 200, entry.body
    assert len(call(LIST, SITE, manager).body["entries"]) == 1
    before = all_items()
    # Site b, a site that does not exist and another tenant's site (asked under acme) are not found,
    # alike
    for site in ["site-b", "no-such-site", "site-z"]:
        for path, body in [
            (LIST, {}),
            (REGISTER, {"serialNumber": "NEW-1"}),
            (REMOVE, {"entryId": entry_b["entryId"]}),
        ]:
            hidden = call(path, {"tenantId": "acme", "siteId": site, **body}, manager)
            assert (hidden.status, hidden.code) == (404, "NOT_FOUND"), (path, site)
            assert hidden.body["error"]["message"] == "site not found"
    # Naming another tenant is refused outright
    for path, body in [(LIST, {}), (REGISTER, {"serialNumber": "NEW-1"})]:
        foreign = call(path, {"tenantId": "globex", "siteId": "site-z", **body}, manager)
        assert (foreign.status, foreign.code) == (403, "PERMISSION_DENIED")
    # An entry of site b, named at site a, is not found either
    crossed = call(REMOVE, {**SITE, "entryId": entry_b["entryId"]}, manager)
    assert (crossed.status, crossed.code) == (404, "NOT_FOUND")
    assert all_items() == before
    assert call(REMOVE, {**SITE, "entryId": entry.body["entryId"]}, manager).status == 200


def test_read_only_and_unrelated_grants(admin_key: str) -> None:
    make_site(admin_key, "site-a", pool="pool-a")
    call(REGISTER, MACHINE, admin_key)
    reader = make_key(admin_key, "compute:discovery:read@site/site-a")
    pool_reader = make_key(admin_key, "compute:pools:read@site/site-a")
    pool_scoped = make_key(admin_key, "compute:discovery:*@compute-pool/pool-a")
    before = all_items()
    # A reader lists but cannot register
    assert call(LIST, SITE, reader).status == 200
    denied = call(REGISTER, {**SITE, "serialNumber": "NEW-1"}, reader)
    assert (denied.status, denied.code) == (403, "PERMISSION_DENIED")
    # A key reaching the site without any discovery permission is denied, not blind
    assert call(LIST, SITE, pool_reader).code == "PERMISSION_DENIED"
    # The inventory belongs to the site: a pool-scoped grant does not reach it
    assert call(LIST, SITE, pool_scoped).code == "NOT_FOUND"
    assert all_items() == before


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (REGISTER, {**MACHINE, "colour": "red"}, "colour"),
        (REGISTER, {**SITE, "serialNumber": 12345}, "serialNumber"),
        (REGISTER, {**SITE, "macAddresses": "aa:bb:cc:dd:ee:f0"}, "macAddresses"),
        (REGISTER, {**SITE, "macAddresses": ["aa:bb:cc:dd:ee:f0", "aa:bb:cc:dd:ee"]}, "macAddresses.1"),
        (REGISTER, {**SITE, "macAddresses": ["aa:bb:cc:dd:ee:f0"] * 33}, "macAddresses"),
        (REGISTER, {**SITE, "systemUuid": "226e380e-67d1-4214-9868"}, "systemUuid"),
        (REGISTER, {**SITE, "machineFingerprint": ""}, "machineFingerprint"),
        (REGISTER, {**SITE, "machineFingerprint": "   "}, "machineFingerprint"),
        (REGISTER, {**SITE, "machineFingerprint": "f" * 257}, "machineFingerprint"),
        (REGISTER, {**SITE, "machineFingerprint": "empreinte-é"}, "machineFingerprint"),
        (REGISTER, {**SITE, "serialNumber": "AB\u0007C"}, "serialNumber"),
        (REGISTER, {**SITE, "serialNumber": "S" * 129}, "serialNumber"),
        (REGISTER, {**MACHINE, "hostname": "-bad-"}, "hostname"),
        (REGISTER, {**MACHINE, "description": "bad\u0007"}, "description"),
        (REGISTER, {**MACHINE, "siteId": "-site"}, "siteId"),
        (REGISTER, {**MACHINE, "tenantId": "a" * 129}, "tenantId"),
        (REGISTER, {k: v for k, v in MACHINE.items() if k != "siteId"}, "siteId"),
        # Placeholders are refused, naming the field
        (REGISTER, {**SITE, "serialNumber": "To Be Filled By O.E.M."}, "serialNumber"),
        (REGISTER, {**SITE, "serialNumber": "0000000"}, "serialNumber"),
        (REGISTER, {**SITE, "serialNumber": "   "}, "serialNumber"),
        (REGISTER, {**SITE, "systemUuid": "03000200-0400-0500-0006-000700080009"}, "systemUuid"),
        (REGISTER, {**SITE, "systemUuid": "{FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF}"}, "systemUuid"),
        (REGISTER, {**SITE, "macAddresses": ["aa:bb:cc:dd:ee:f0", "00-00-00-00-00-00"]}, "macAddresses.1"),
        (REGISTER, {**SITE, "macAddresses": ["FF:FF:FF:FF:FF:FF"]}, "macAddresses.0"),
        (LIST, {**SITE, "limit": 0}, "limit"),
        (LIST, {**SITE, "limit": 201}, "limit"),
        (LIST, {**SITE, "limit": "10"}, "limit"),
        (LIST, {**SITE, "cursor": "disc_nope"}, "cursor"),
        (REMOVE, {**SITE, "entryId": "disc_" + "u" * 26}, "entryId"),
        (REMOVE, {**SITE, "entryId": "jtok_" + "0" * 26}, "entryId"),
        (REMOVE, SITE, "entryId"),
    ],
)
def test_invalid_fields_are_named_and_nothing_is_written(
    site_a: str, path: str, body: dict[str, Any], field: str
) -> None:
    call(REGISTER, {**SITE, "serialNumber": "EXISTING-1"}, site_a)
    before = all_items()
    reply = call(path, body, site_a)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
    assert field in [d["field"] for d in reply.body["error"]["details"]], reply.body
    assert field in reply.body["error"]["message"]
    assert all_items() == before


@pytest.mark.parametrize(
    "body",
    [SITE, {**SITE, "macAddresses": []}, {**SITE, "hostname": "h1", "description": "no ids"}],
)
def test_an_entry_without_any_identifier_is_refused(site_a: str, body: dict[str, Any]) -> None:
    before = all_items()
    reply = call(REGISTER, body, site_a)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT")
    assert "at least one identifier" in reply.body["error"]["message"]
    assert all_items() == before


def test_a_placeholder_says_why(site_a: str) -> None:
    reply = call(REGISTER, {**SITE, "serialNumber": "Default string"}, site_a)
    assert reply.code == "INVALID_ARGUMENT"
    assert "placeholder" in reply.body["error"]["message"]
    assert "Default string" in reply.body["error"]["message"]


@pytest.mark.parametrize("raw", [b"{not json", b"[]", b"\xff\xfe\x00"])
def test_malformed_bodies_are_invalid_argument(site_a: str, raw: bytes) -> None:
    before = all_items()
    reply = call(REGISTER, None, site_a, raw=raw)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT")
    assert all_items() == before


def test_unknown_keys_are_unauthenticated(site_a: str) -> None:
    reply = call(REGISTER, MACHINE, "jpk_nonsense")
    assert (reply.status, reply.code) == (401, "UNAUTHENTICATED")


# --- lookup (the attestor's side) -----------------------------------------------------------


@pytest.mark.parametrize(
    "reported",
    [
        {"serial": "pf2abcde"},
        {"serial": "  PF2ABCDE\n"},
        {"system_uuid": "226E380E-67D1-4214-9868-5383A79AF0B8"},
        {"system_uuid": "{226e380e67d1421498685383a79af0b8}"},
        {"macs": ["AA-BB-CC-DD-EE-F1"]},
        {"macs": ["00:00:00:00:00:00", "not a mac", "aabbccddeef0"]},
        {"fingerprint": "fp:sha256:Zm9vYmFy"},
    ],
)
def test_lookup_matches_by_each_identifier_in_one_call(site_a: str, reported: dict[str, Any]) -> None:
    entry = call(REGISTER, MACHINE, site_a).body
    with dynamodb_calls() as calls:
        found = discovery.lookup("acme", "site-a", **reported)
    assert calls == ["BatchGetItem"]
    assert found is not None
    assert found.entry_id == entry["entryId"] and found.hostname == "gpu-07.rack-3"
    assert len(found.matched_by) == 1 and found.other_entry_ids == ()


def test_lookup_reports_every_identifier_that_matched(site_a: str) -> None:
    entry = call(REGISTER, MACHINE, site_a).body
    with dynamodb_calls() as calls:
        found = discovery.lookup(
            "acme",
            "site-a",
            serial="PF2ABCDE",
            system_uuid="226e380e-67d1-4214-9868-5383a79af0b8",
            macs=["aa:bb:cc:dd:ee:f0", "aa:bb:cc:dd:ee:f1"],
            fingerprint="fp:sha256:Zm9vYmFy",
        )
    assert calls == ["BatchGetItem"]
    assert found == discovery.DiscoveryMatch(
        entry_id=entry["entryId"],
        hostname="gpu-07.rack-3",
        matched_by=("serialNumber", "systemUuid", "macAddresses", "machineFingerprint"),
        other_entry_ids=(),
    )


def test_lookup_of_an_unknown_machine_is_none_in_one_call(site_a: str) -> None:
    call(REGISTER, MACHINE, site_a)
    with dynamodb_calls() as calls:
        assert discovery.lookup("acme", "site-a", serial="UNKNOWN-9", macs=["aa:bb:cc:00:00:01"]) is None
    assert calls == ["BatchGetItem"]
    # The same machine at another site, or of another tenant, is unknown there
    assert discovery.lookup("acme", "site-b", serial="PF2ABCDE") is None
    assert discovery.lookup("globex", "site-a", serial="PF2ABCDE") is None


def test_placeholders_and_junk_never_match_and_cost_nothing(site_a: str) -> None:
    call(REGISTER, MACHINE, site_a)
    with dynamodb_calls() as calls:
        found = discovery.lookup(
            "acme",
            "site-a",
            serial="To Be Filled By O.E.M.",
            system_uuid="03000200-0400-0500-0006-000700080009",
            macs=["00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", "junk"],
            fingerprint="   ",
        )
    assert found is None and calls == []
    assert discovery.lookup("acme", "site-a", fingerprint="f" * 2000, serial="S" * 5000) is None


def test_lookup_prefers_the_entry_most_identifiers_name_and_lists_the_others(site_a: str) -> None:
    # Given two entries, one known by serial and MAC, the other by UUID
    first = call(
        REGISTER, {**SITE, "serialNumber": "SN-1", "macAddresses": ["aa:bb:cc:dd:ee:01"]}, site_a
    ).body
    second = call(REGISTER, {**SITE, "systemUuid": "226e380e-67d1-4214-9868-5383a79af0b8"}, site_a).body
    # When a machine reports identifiers of both
    found = discovery.lookup(
        "acme",
        "site-a",
        serial="SN-1",
        system_uuid="226e380e-67d1-4214-9868-5383a79af0b8",
        macs=["aa:bb:cc:dd:ee:01"],
    )
    # Then the entry two identifiers name wins, and the other is shown
    assert found is not None
    assert found.entry_id == first["entryId"] and found.other_entry_ids == (second["entryId"],)
    assert found.matched_by == ("serialNumber", "macAddresses")
    # With one identifier each, the stronger one (UUID over MAC) wins
    tie = discovery.lookup(
        "acme", "site-a", system_uuid="226e380e-67d1-4214-9868-5383a79af0b8", macs=["aa:bb:cc:dd:ee:01"]
    )
    assert tie is not None and tie.entry_id == second["entryId"] and tie.hostname is None


# --- the race -------------------------------------------------------------------------------


def test_eight_concurrent_registrations_of_one_serial_make_exactly_one_entry(table: str) -> None:
    # Given a site with a pool
    admin = keyauth.verify(install_admin_key("acme", None, "t"))
    assert admin is not None
    from joinplane import pools

    pools.create(
        admin, pools.CreatePool(tenantId="acme", poolId="p", siteId="site-a", name="P", workspaceId="w")
    )

    def register(index: int) -> Any:
        request = discovery.RegisterEntry(
            tenantId="acme",
            siteId="site-a",
            serialNumber="CONTESTED-1",
            macAddresses=[f"aa:bb:cc:dd:ee:{index:02x}"],
            hostname=f"racer-{index}",
        )
        return discovery.register(admin, request)

    # When eight machines with one serial number register at once
    results = release_together(register, 8, catch=JoinplaneError)

    # Then one entry is made and every other registration is told it exists
    winners = [r for r in results if isinstance(r, dict)]
    assert len(winners) == 1, results
    assert all(isinstance(r, AlreadyExists) for r in results if not isinstance(r, dict)), results
    entries = [item for item in discovery_items() if item["sk"].startswith("ENTRY#")]
    assert [e["entryId"] for e in entries] == [winners[0]["entryId"]]
    # No loser left an index item behind: only the winner's serial and MAC are indexed
    indexed = {item["sk"]: item["entryId"] for item in discovery_items() if item["sk"].startswith("ID#")}
    assert set(indexed.values()) == {winners[0]["entryId"]} and len(indexed) == 2
    assert dynamo.get(*discovery_db.index_key("acme", "site-a", "serial", "CONTESTED-1")) is not None
