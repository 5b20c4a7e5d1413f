"""Answers the contract run cannot reach, checked against the document: schemathesis has no join
token, machine token or cluster key, and finds no machine or join request to read. Here real
joins (admitted, deferred, a dry run, a renewal) and the operator views of what they made are
validated against the schemas shared/openapi.json gives for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from joinplane.contract import openapi
from tests.support import call, join, openssl_csr

DOCUMENT = openapi.document()
REGISTRY: Registry[Any] = Registry().with_resource(
    "urn:doc", Resource.from_contents(DOCUMENT, default_specification=DRAFT202012)
)


def answer_schema(path: str, status: int) -> dict[str, Any]:
    responses = DOCUMENT["paths"][path]["post"]["responses"]
    ref = responses[str(status)]["content"]["application/json"]["schema"]["$ref"]
    return {"$ref": "urn:doc" + ref}


def assert_documented(path: str, status: int, body: Any) -> None:
    validator = Draft202012Validator(answer_schema(path, status), registry=REGISTRY)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(body)]
    assert not errors, f"{path} {status} is not as documented: {errors}"


def operator(path: str, body: dict[str, Any], key: str) -> Any:
    reply = call(path, body, key)
    assert reply.status == 200, reply.body
    assert_documented(path, 200, reply.body)
    return reply.body


def test_real_joins_and_what_they_made_answer_as_documented(admin_key: str, tmp_path: Path) -> None:
    # Given a pool with every bootstrap default set, a cluster key, and two tokens
    bootstrap = {
        "controlplaneHttpUrl": "https://cp.example.com",
        "controlplaneGrpcPort": 443,
        "disabledServices": ["metrics"],
        "imageClipVersion": 3,
        "telemetry": {"enabled": True, "logs": {"destination": "s3://logs"}},
        "billing": {"usageEndpoint": "https://bill", "billableMarginPct": 12.5},
        "workerImage": "worker:1",
    }
    pool = {"tenantId": "acme", "siteId": "site-1", "poolId": "pool-1", "name": "P", "workspaceId": "w"}
    operator("/api/compute/pools/create", {**pool, "bootstrap": bootstrap, "cluster": {}}, admin_key)
    operator("/api/compute/clusters/rotateKey", {"tenantId": "acme", "poolId": "pool-1"}, admin_key)
    admit = operator("/api/compute/joinTokens/create", {"tenantId": "acme", "poolId": "pool-1"}, admin_key)
    defer = operator(
        "/api/compute/joinTokens/create",
        {"tenantId": "acme", "siteId": "site-1", "attestation": {"tpm": "defer-unlisted"}},
        admin_key,
    )
    facts = {
        "hostname": "gpu-01",
        "cpuCount": "64",
        "memoryMb": 1024.0,
        "hardware": {"serialNumber": "SN-1", "macAddresses": ["3c:ec:ef:12:34:56"]},
        "preflight": [{"name": "disk", "ok": False, "severity": "warning", "message": "slow"}],
    }

    # When a machine joins (dry run first), another is deferred, and the first renews
    csr = openssl_csr(tmp_path / "a")
    dry = join({**facts, "joinToken": admit["token"], "csr": csr, "dryRun": True})
    admitted = join({**facts, "joinToken": admit["token"], "csr": csr})
    deferred = join({"joinToken": defer["token"], "csr": openssl_csr(tmp_path / "b"), "tpm": {}})
    renewed = join(
        {"machineToken": admitted.body["machineToken"], "csr": csr},
        path="/machines/renew",
        signed_by=tmp_path / "a" / "key.pem",
    )

    # Then every answer is as the document says
    assert (dry.status, admitted.status, deferred.status, renewed.status) == (200, 200, 202, 200)
    assert dry.body["verdict"] == "admit"
    for status, body in ((200, dry.body), (200, admitted.body), (202, deferred.body)):
        assert_documented("/machines/join", status, body)
    assert_documented("/machines/renew", 200, renewed.body)
    # and so are the operator views of what the joins made
    machine_id = admitted.body["machineId"]
    operator("/api/compute/machines/get", {"tenantId": "acme", "machineId": machine_id}, admin_key)
    operator("/api/compute/machines/list", {"tenantId": "acme", "poolId": "pool-1"}, admin_key)
    listed = operator(
        "/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "pool-1", "state": "all"}, admin_key
    )
    request_id = listed["requests"][0]["requestId"]
    decided = {"tenantId": "acme", "poolId": "pool-1", "requestId": request_id, "reason": "ok"}
    operator("/api/compute/joinRequests/approve", decided, admin_key)
    operator("/api/compute/joinRequests/reject", decided, admin_key)
    operator("/api/compute/machines/revoke", {"tenantId": "acme", "machineId": machine_id}, admin_key)
    operator("/api/compute/pools/get", {"tenantId": "acme", "poolId": "pool-1"}, admin_key)
    operator("/api/compute/joinTokens/list", {"tenantId": "acme", "siteId": "site-1"}, admin_key)
    operator("/api/compute/apiKeys/list", {"tenantId": "acme"}, admin_key)
