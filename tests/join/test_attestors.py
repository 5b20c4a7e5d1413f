"""Attestors on real joins: placeholder and cloned hardware ids, discovery, TPM, site tokens."""

from __future__ import annotations

from joinplane import keyauth
from joinplane.join_requests import ApproveJoinRequest, approve
from tests.support import call, join
from tests.support.tpm_blobs import SoftTpm, join_with_tpm


def reasons(reply) -> list[str]:
    assert reply.status == 202, reply.body
    from joinplane.dal import dynamo

    request = dynamo.get(f"JREQ#{reply.body['joinRequest']['requestId']}", "JREQ")
    assert request is not None
    return [r["code"] for r in request["reasons"]]


def test_placeholder_hardware_ids_defer(make_token, machine_factory) -> None:
    # Given a token, When a machine joins with the placeholder ids a vendor ships unfilled
    token = make_token(maxUses=5)
    reply = join(
        {
            "joinToken": token["token"],
            "csr": machine_factory().csr,
            "hardware": {
                "serialNumber": "To Be Filled By O.E.M.",
                "systemUuid": "03000200-0400-0500-0006-000700080009",
                "macAddresses": ["00:00:00:00:00:00"],
            },
        }
    )
    # Then it is deferred, each id named as a placeholder
    assert reasons(reply) == ["placeholder_hardware_id"] * 3


def test_a_cloned_serial_defers_the_second_machine(make_token, machine_factory) -> None:
    token = make_token(maxUses=5)
    # Given a machine admitted with a serial number and system UUID
    hardware = {"serialNumber": "SN-7781-A", "systemUuid": "4c4c4544-0042-3510-8052-b4c04f564433"}
    first = join({"joinToken": token["token"], "csr": machine_factory().csr, "hardware": hardware})
    assert first.status == 200
    # When another machine (another key) joins with the same ids, Then it is deferred as a clone
    clone = join({"joinToken": token["token"], "csr": machine_factory().csr, "hardware": hardware})
    assert reasons(clone) == ["duplicate_hardware_id", "duplicate_hardware_id"]


def test_revoking_a_machine_releases_its_hardware_ids(make_token, machine_factory, admin_key) -> None:
    token = make_token(maxUses=5)
    # Given a machine admitted with a serial number, then revoked
    hardware = {"serialNumber": "SN-1"}
    first = join({"joinToken": token["token"], "csr": machine_factory().csr, "hardware": hardware}).body
    call("/api/compute/machines/revoke", {"tenantId": "acme", "machineId": first["machineId"]}, admin_key)
    # When a new machine joins with that serial, Then it is admitted: the serial is free again
    again = join({"joinToken": token["token"], "csr": machine_factory().csr, "hardware": hardware})
    assert again.status == 200, again.body


def test_tpm_policies(make_token, machine_factory, admin_key) -> None:
    # Given a token that requires a TPM
    tpm = SoftTpm.make()
    required = make_token(attestation={"tpm": "require"}, maxUses=5)
    # When a machine joins without one, Then it is denied
    denied = join({"joinToken": required["token"], "csr": machine_factory().csr})
    assert (denied.status, denied.body["code"], denied.reason) == (
        403,
        7,
        "JOIN_DENIED",
    ) and "TPM" in denied.body["message"]
    # When one proves a TPM whose EK the site's allow-list lacks, Then it is deferred
    machine = machine_factory()
    _, unlisted = join_with_tpm({"joinToken": required["token"], "csr": machine.csr}, machine.key, tpm)
    assert reasons(unlisted) == ["tpm_unlisted"]
    # When the EK is added to the allow-list, Then a join proving it is admitted
    added = call(
        "/api/compute/tpmAllowList/add",
        {"tenantId": "acme", "siteId": "rack-1", "ekPublicKeySha256": tpm.ek_sha256().upper()},
        admin_key,
    )
    assert added.status == 200, added.body
    other = SoftTpm(tpm.ek, SoftTpm.make().ak_blob)  # the same TPM, a new AK
    machine = machine_factory()
    _, listed = join_with_tpm({"joinToken": required["token"], "csr": machine.csr}, machine.key, other)
    assert listed.status == 200, listed.body


def test_discovery_defers_unknown_machines(make_token, machine_factory, admin_key) -> None:
    # Given a token that defers machines the site's discovery inventory lacks
    token = make_token(attestation={"discovery": "defer-unknown"}, maxUses=5)
    # When an unregistered machine joins, Then it is deferred as unknown
    unknown = join(
        {"joinToken": token["token"], "csr": machine_factory().csr, "hardware": {"serialNumber": "X-1"}}
    )
    assert reasons(unknown) == ["unknown_machine"]
    # When a machine is registered, Then it joins, its serial matched in canonical form
    registered = call(
        "/api/compute/discovery/register",
        {"tenantId": "acme", "siteId": "rack-1", "serialNumber": "x-2", "hostname": "gpu-02"},
        admin_key,
    )
    assert registered.status == 200, registered.body
    known = join(
        {"joinToken": token["token"], "csr": machine_factory().csr, "hardware": {"serialNumber": " X-2 "}}
    )
    assert known.status == 200, known.body


def test_a_site_token_defers_until_a_pool_claims_the_request(make_token, machine_factory, admin_key) -> None:
    # Given a site token (no pool), When a machine joins with it, Then it is deferred for a pool to claim
    token = make_token(siteId="rack-1")
    machine = machine_factory()
    deferred = join({"joinToken": token["token"], "csr": machine.csr})
    assert reasons(deferred) == ["site_token"]
    # When pool gpu's operator approves the request
    admin = keyauth.verify(admin_key)
    assert admin is not None
    claimed = approve(
        admin,
        ApproveJoinRequest(
            tenantId="acme", poolId="gpu", requestId=deferred.body["joinRequest"]["requestId"]
        ),
    )
    # Then the request is the pool's, and the machine's retry is admitted into it
    assert claimed["poolId"] == "gpu" and claimed["state"] == "approved"
    admitted = join({"joinToken": token["token"], "csr": machine.csr}, signed_by=machine.key)
    assert admitted.status == 200 and admitted.body["poolName"] == "GPU pool"
