"""Operators' actions reach the audit trail. Each action is made over its operator
route (authorizer and function, as API Gateway would call them); the table's stream, through the
template's filter, goes through the publisher into the audit trail. Each event names the acting
API key by id and carries no secret, nor a secret's hash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from joinplane import clock, credentials
from joinplane.dal import dynamo
from tests.support import call, join, key_id_of, openssl_csr
from tests.support.events import publish_table_stream, table_stream

TENANT = {"tenantId": "acme"}
POOL = {**TENANT, "poolId": "gpu"}
SITE = {**TENANT, "siteId": "s1"}


def audit_trail(admin_key: str, detail_type: str) -> list[dict[str, Any]]:
    """auditEvents/list of one detail-type, oldest first."""
    reply = call(
        "/api/compute/auditEvents/list", {**TENANT, "detailType": detail_type, "limit": 200}, admin_key
    )
    assert reply.status == 200, reply.body
    return list(reversed(reply.body["events"]))


def stored_hashes() -> set[str]:
    """Every secret hash the table holds (tokens', keys', cluster keys')."""
    from tests.support.table import all_items

    return {item["secretSha256"] for item in all_items() if "secretSha256" in item}


def assert_no_secret(published: list[Any], listed: list[dict[str, Any]], *secrets: str) -> None:
    text = json.dumps([e.detail for e in published]) + json.dumps(listed)
    for secret in secrets:
        assert secret not in text
        assert credentials.digest(secret) not in text
    for digest in stored_hashes():
        assert digest not in text
    assert "secretSha256" not in text


@pytest.fixture
def pool(admin_key: str) -> str:
    reply = call(
        "/api/compute/pools/create", {**POOL, "siteId": "s1", "name": "GPU", "workspaceId": "w"}, admin_key
    )
    assert reply.status == 200, reply.body
    return "gpu"


def test_a_join_token_created_and_revoked(admin_key: str, pool: str) -> None:
    # Given an operator's key
    actor = key_id_of(admin_key)
    # When it creates a join token and revokes it
    created = call("/api/compute/joinTokens/create", {**POOL, "maxUses": 3}, admin_key).body
    call("/api/compute/joinTokens/revoke", {**TENANT, "tokenId": created["tokenId"]}, admin_key)
    published = publish_table_stream()
    # Then the audit trail holds both, naming the token and the acting key
    made = audit_trail(admin_key, "security.join-token.created")
    gone = audit_trail(admin_key, "security.join-token.revoked")
    assert [(e["detail"]["tokenId"], e["detail"]["decidedBy"], e["poolId"]) for e in made] == [
        (created["tokenId"], actor, "gpu")
    ]
    assert made[0]["detail"]["maxUses"] == 3
    assert [(e["detail"]["tokenId"], e["detail"]["decidedBy"], e["detail"]["state"]) for e in gone] == [
        (created["tokenId"], actor, "revoked")
    ]
    # And no event holds the token's secret, its hash, or the admin key's
    assert_no_secret(published, made + gone, created["token"], admin_key)


def test_a_used_token_makes_no_event(admin_key: str, pool: str, tmp_path: Path) -> None:
    token = call("/api/compute/joinTokens/create", {**POOL, "maxUses": 2}, admin_key).body
    assert join({"joinToken": token["token"], "csr": openssl_csr(tmp_path, "/CN=m")}).status == 200
    publish_table_stream()
    # A use spent is no administered change: the token's one event is its creation
    assert len(audit_trail(admin_key, "security.join-token.created")) == 1
    assert audit_trail(admin_key, "security.join-token.revoked") == []


def test_an_api_key_created_and_revoked(admin_key: str) -> None:
    actor = key_id_of(admin_key)
    created = call(
        "/api/compute/apiKeys/create", {**TENANT, "grants": ["compute:pools:read@tenant"]}, admin_key
    ).body
    call("/api/compute/apiKeys/revoke", {**TENANT, "keyId": created["keyId"]}, admin_key)
    published = publish_table_stream()
    made = [
        e
        for e in audit_trail(admin_key, "security.api-key.created")
        if e["detail"]["keyId"] == created["keyId"]
    ]
    gone = audit_trail(admin_key, "security.api-key.revoked")
    assert [(e["detail"]["decidedBy"], e["detail"]["grants"]) for e in made] == [
        (actor, ["compute:pools:read@tenant"])
    ]
    assert [(e["detail"]["keyId"], e["detail"]["decidedBy"]) for e in gone] == [(created["keyId"], actor)]
    assert_no_secret(published, made + gone, created["key"], admin_key)


def test_a_pool_created_updated_and_archived(admin_key: str, pool: str) -> None:
    actor = key_id_of(admin_key)
    # When the pool's name and bootstrap change (the bootstrap holds a billing token), then it is archived
    billing = "usage-token-that-is-a-credential"
    update = {**POOL, "name": "GPU racks", "bootstrap": {"billing": {"usageToken": billing}}}
    assert call("/api/compute/pools/update", update, admin_key).status == 200
    assert call("/api/compute/pools/archive", POOL, admin_key).status == 200
    published = publish_table_stream()
    created = audit_trail(admin_key, "security.pool.created")
    updated = audit_trail(admin_key, "security.pool.updated")
    archived = audit_trail(admin_key, "security.pool.archived")
    assert [(e["poolId"], e["detail"]["decidedBy"], e["detail"]["version"]) for e in created] == [
        ("gpu", actor, 1)
    ]
    # Then the update names what changed, never the values
    assert [(e["detail"]["changed"], e["detail"]["decidedBy"], e["detail"]["version"]) for e in updated] == [
        (["name", "bootstrap"], actor, 2)
    ]
    assert [(e["detail"]["state"], e["detail"]["decidedBy"]) for e in archived] == [("archived", actor)]
    assert billing not in json.dumps([e.detail for e in published])
    assert_no_secret(published, created + updated + archived, admin_key)


def test_a_cluster_key_rotated_names_the_acting_key(admin_key: str, pool: str) -> None:
    actor = key_id_of(admin_key)
    call("/api/compute/clusters/rotateKey", POOL, admin_key)
    call("/api/compute/clusters/rotateKey", POOL, admin_key)
    publish_table_stream()
    rotated = audit_trail(admin_key, "security.cluster-key.rotated")
    assert [e["detail"]["decidedBy"] for e in rotated] == [actor, actor]


def test_a_cluster_key_rotation_is_one_event_naming_both_keys(admin_key: str, pool: str) -> None:
    first = call("/api/compute/clusters/rotateKey", POOL, admin_key).body
    second = call("/api/compute/clusters/rotateKey", POOL, admin_key).body
    published = publish_table_stream()
    rotated = audit_trail(admin_key, "security.cluster-key.rotated")
    # (Within one second the trail orders events by id: compared as a set)
    assert {(e["detail"]["clusterKeyId"], e["detail"]["previousClusterKeyId"]) for e in rotated} == {
        (first["clusterKeyId"], None),
        (second["clusterKeyId"], first["clusterKeyId"]),
    }
    # The pool's repointing is no pool update (its settings and version did not change)
    assert audit_trail(admin_key, "security.pool.updated") == []
    assert_no_secret(published, rotated, first["clusterKey"], second["clusterKey"], admin_key)


def test_a_discovery_entry_registered_and_removed(admin_key: str, pool: str) -> None:
    actor = key_id_of(admin_key)
    entry = call("/api/compute/discovery/register", {**SITE, "serialNumber": "PF2ABCDE"}, admin_key).body
    assert (
        call("/api/compute/discovery/remove", {**SITE, "entryId": entry["entryId"]}, admin_key).status == 200
    )
    published = publish_table_stream()
    added = audit_trail(admin_key, "security.discovery-entry.registered")
    removed = audit_trail(admin_key, "security.discovery-entry.removed")
    assert [
        (e["detail"]["entryId"], e["detail"]["serialNumber"], e["detail"]["decidedBy"]) for e in added
    ] == [(entry["entryId"], "PF2ABCDE", actor)]
    # The removal names who removed it, although a deletion's stream record cannot
    assert [(e["detail"]["entryId"], e["siteId"], e["detail"]["decidedBy"]) for e in removed] == [
        (entry["entryId"], "s1", actor)
    ]
    assert_no_secret(published, added + removed, admin_key)


def test_a_tpm_key_allowed_removed_and_allowed_again(admin_key: str, pool: str) -> None:
    actor = key_id_of(admin_key)
    ek = {**SITE, "ekPublicKeySha256": "ab" * 32}
    assert call("/api/compute/tpmAllowList/add", ek, admin_key).status == 200
    assert call("/api/compute/tpmAllowList/remove", ek, admin_key).status == 200
    clock.advance(1)  # a later second: an addition is told apart by its instant (docs/events.md)
    assert call("/api/compute/tpmAllowList/add", ek, admin_key).status == 200
    publish_table_stream()
    allowed = audit_trail(admin_key, "security.tpm-key.allowed")
    removed = audit_trail(admin_key, "security.tpm-key.removed")
    assert [(e["detail"]["ekPublicKeySha256"], e["detail"]["decidedBy"]) for e in removed] == [
        ("ab" * 32, actor)
    ]
    # Each addition is its own event
    assert [e["detail"]["decidedBy"] for e in allowed] == [actor, actor]
    assert len({e["eventId"] for e in allowed}) == 2


def test_a_machine_revoked_names_the_key(admin_key: str, pool: str, tmp_path: Path) -> None:
    actor = key_id_of(admin_key)
    token = call("/api/compute/joinTokens/create", POOL, admin_key).body
    machine = join({"joinToken": token["token"], "csr": openssl_csr(tmp_path, "/CN=m")}).body
    call(
        "/api/compute/machines/revoke",
        {**TENANT, "machineId": machine["machineId"], "reason": "stolen"},
        admin_key,
    )
    published = publish_table_stream()
    revoked = audit_trail(admin_key, "security.machine.revoked")
    assert [(e["detail"]["machineId"], e["detail"]["decidedBy"]) for e in revoked] == [
        (machine["machineId"], actor)
    ]
    assert_no_secret(published, revoked, token["token"], machine["machineToken"], admin_key)


def test_a_replayed_stream_yields_the_same_events(admin_key: str, pool: str) -> None:
    # Given the stream published once
    call("/api/compute/joinTokens/create", POOL, admin_key)
    call("/api/compute/pools/update", {**POOL, "name": "again"}, admin_key)
    first = publish_table_stream()
    # When every record is delivered again (at least once delivery)
    again = publish_table_stream()
    # Then each record yields the event it yielded, with the same id, and the trail holds each once
    assert [e.event_id for e in again] == [e.event_id for e in first] and len(first) >= 3
    listed = call("/api/compute/auditEvents/list", {**TENANT, "limit": 200}, admin_key).body["events"]
    assert sorted(e["eventId"] for e in listed) == sorted(e.event_id for e in first)


def test_the_stream_filter_passes_every_administered_item(admin_key: str, pool: str) -> None:
    # The publisher sees only what template.yaml's FilterCriteria lets through: every item an admin
    # event is made of must pass it (pools, tokens, keys, entries, EKs, removal records)
    call("/api/compute/joinTokens/create", POOL, admin_key)
    entry = call("/api/compute/discovery/register", {**SITE, "serialNumber": "X1"}, admin_key).body
    call("/api/compute/discovery/remove", {**SITE, "entryId": entry["entryId"]}, admin_key)
    seen = {dynamo.from_attribute(r["dynamodb"]["Keys"]["pk"]).split("#")[0] for r in table_stream()}
    assert {"TENANT", "JOINTOKEN", "APIKEY", "SITE", "REMOVED"} <= seen
