"""The OpenAPI document's own promises, checked without a server (fast; the server side is
test_openapi_schemathesis.py): every route, typed answers, an example per operation that its own
schema accepts, and the rules the validators enforce expressed in the schemas."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from joinplane.contract import openapi

DOCUMENT = openapi.document()
OPERATIONS = [(path, method, op) for path, item in DOCUMENT["paths"].items() for method, op in item.items()]
# Every operation but GET /crl/{caId}: the RPCs, a JSON body in and a JSON view out.
RPCS = [(path, method, op) for path, method, op in OPERATIONS if method == "post"]


def valid(component: str, value: Any) -> bool:
    registry: Registry[Any] = Registry().with_resource(
        "urn:doc", Resource.from_contents(DOCUMENT, default_specification=DRAFT202012)
    )
    schema = {"$ref": f"urn:doc#/components/schemas/{component}"}
    return Draft202012Validator(schema, registry=registry).is_valid(value)


def test_every_template_route_is_documented_and_nothing_else() -> None:
    assert set(DOCUMENT["paths"]) == set(openapi.routes())


def test_servers_tags_and_security_schemes_are_declared() -> None:
    assert DOCUMENT["servers"][0]["url"] == "http://127.0.0.1:3000"
    declared = {tag["name"] for tag in DOCUMENT["tags"]}
    for _, _, op in OPERATIONS:
        assert set(op["tags"]) <= declared
    assert set(DOCUMENT["components"]["securitySchemes"]) == {"apiKey", "joinToken", "clusterKey"}


def test_the_only_other_operations_are_the_crl_and_the_bundle_answers_without_credentials() -> None:
    assert {(path, method) for path, method, _ in OPERATIONS if method != "post"} == {
        ("/crl/{caId}", "get"),
        ("/bundle/{caId}", "get"),
    }
    for path, media_type in (
        ("/crl/{caId}", "application/pkix-crl"),
        ("/bundle/{caId}", "application/pem-certificate-chain"),
    ):
        op = DOCUMENT["paths"][path]["get"]
        assert op["security"] == [] and "requestBody" not in op
        assert set(op["responses"]["200"]["content"]) == {media_type}
        assert op["responses"]["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")


@pytest.mark.parametrize(("path", "method", "op"), RPCS, ids=[p for p, _, _ in RPCS])
def test_each_operation_is_described_with_an_example_its_schema_accepts(
    path: str, method: str, op: dict[str, Any]
) -> None:
    assert method == "post"
    assert op["summary"] and op["description"] and op["operationId"]
    content = op["requestBody"]["content"]["application/json"]
    component = content["schema"]["$ref"].rsplit("/", 1)[1]
    assert valid(component, content["example"]), path


def test_operation_ids_are_unique() -> None:
    ids = [op["operationId"] for _, _, op in OPERATIONS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("path", "method", "op"), RPCS, ids=[p for p, _, _ in RPCS])
def test_every_success_is_a_typed_view_that_forbids_unknown_fields(
    path: str, method: str, op: dict[str, Any]
) -> None:
    schema = op["responses"]["200"]["content"]["application/json"]["schema"]
    component = DOCUMENT["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    assert component["type"] == "object" and component.get("properties"), path
    if path.startswith("/api/compute/") or path.startswith("/machines/"):
        assert component["additionalProperties"] is False, path


def test_the_gateways_own_401_is_documented_on_operator_routes() -> None:
    for path, _, op in OPERATIONS:
        if path.startswith("/api/compute/"):
            options = op["responses"]["401"]["content"]["application/json"]["schema"]["oneOf"]
            assert {"$ref": "#/components/schemas/GatewayMessage"} in options
    assert valid("GatewayMessage", {"message": "Unauthorized"})
    error = {"code": "UNAUTHENTICATED", "reason": "UNAUTHENTICATED", "message": "m", "details": []}
    assert valid("Error", {"error": error})


def test_either_or_fields_are_expressed() -> None:
    # Given exactly one of poolId or siteId (null counts as absent) a token request is valid
    assert valid("CreateJoinToken", {"tenantId": "t", "poolId": "p"})
    assert valid("CreateJoinToken", {"tenantId": "t", "siteId": "s", "poolId": None})
    assert not valid("CreateJoinToken", {"tenantId": "t", "poolId": "p", "siteId": "s"})
    assert not valid("ListJoinTokens", {"tenantId": "t"})
    # and exactly one of the EK's hash or certificate
    ek = "ab" * 32
    assert valid("AddKey", {"tenantId": "t", "siteId": "s", "ekPublicKeySha256": ek})
    assert not valid("AddKey", {"tenantId": "t", "siteId": "s"})
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    assert not valid(
        "AddKey", {"tenantId": "t", "siteId": "s", "ekPublicKeySha256": ek, "ekCertificatePem": pem}
    )
    # and at least one identifier for a discovery entry
    assert not valid("RegisterEntry", {"tenantId": "t", "siteId": "s"})
    assert not valid("RegisterEntry", {"tenantId": "t", "siteId": "s", "macAddresses": []})


def test_validator_rules_are_in_the_schemas() -> None:
    # Grants have their grammar
    assert valid("CreateApiKey", {"tenantId": "t", "grants": ["compute:*@compute-pool/p1"]})
    assert not valid("CreateApiKey", {"tenantId": "t", "grants": [""]})
    # placeholder hardware identifiers are refused, real ones accepted
    base = {"tenantId": "t", "siteId": "s"}
    for serial in ("To be filled by O.E.M.", "0000", "123456789", "  ", "Default string"):
        assert not valid("RegisterEntry", {**base, "serialNumber": serial}), serial
    assert valid("RegisterEntry", {**base, "serialNumber": "SN-7Q2X9"})
    assert not valid("RegisterEntry", {**base, "systemUuid": "00000000-0000-0000-0000-000000000000"})
    assert not valid("RegisterEntry", {**base, "systemUuid": "{03000200-0400-0500-0006-000700080009}"})
    assert valid("RegisterEntry", {**base, "systemUuid": "4C4C4544-0042-3510-8052-B7C04F4E5432"})
    assert not valid("RegisterEntry", {**base, "macAddresses": ["01:00:5e:00:00:01"]})  # multicast
    assert not valid("RegisterEntry", {**base, "macAddresses": ["02:00:00:00:00:00"]})
    assert valid("RegisterEntry", {**base, "macAddresses": ["3c-ec-ef-12-34-56"]})
    # pools/update: optional fields may be left out but not nulled, except cluster
    assert not valid("UpdatePool", {"tenantId": "t", "poolId": "p", "name": None})
    assert valid("UpdatePool", {"tenantId": "t", "poolId": "p", "cluster": None})
    # a whole number written as 75.0 is an integer (JSON has one number type)
    assert valid("ListPools", {"tenantId": "t", "limit": 75.0})


def test_the_join_wire_is_seed_002_plus_our_fields() -> None:
    request = DOCUMENT["components"]["schemas"]["controlplaneJoinMachineRequest"]["properties"]
    seed = {
        "joinToken", "machineFingerprint", "hostname", "os", "arch", "cpuCount", "memoryMb", "gpu",
        "gpuCount", "preflight", "schedulable", "executor", "cpuMillicores", "gpuIds",
        "networkSlotPoolSize", "containerStartConcurrency", "workerImage", "capabilities",
    }  # fmt: skip
    assert set(request) == seed | {"csr", "hardware", "tpm", "awsIam", "dryRun"}
    assert valid("controlplaneJoinMachineRequest", {"memoryMb": "524288", "cpuCount": 8, "hostname": None})
    assert not valid("controlplaneJoinMachineRequest", {"cpu_count_typo": 1})
    join = DOCUMENT["paths"]["/machines/join"]["post"]
    assert [p["name"] for p in join["parameters"]] == ["Joinplane-Proof"]
    assert {"200", "202", "401", "default"} <= set(join["responses"])
    tokens = DOCUMENT["components"]["schemas"]["Attestation"]["properties"]
    assert tokens["identity"]["enum"] == ["any", "key"]


@pytest.mark.parametrize(
    ("component", "answer"),
    [
        ("controlplaneJoinMachineResponse", "JoinMachineResponse"),
        ("joinplaneJoinRequestRef", "JoinRequestRef"),
        ("controlplaneMachineBootstrapConfig", "MachineBootstrapConfig"),
        ("controlplaneMachineTelemetryConfig", "TelemetryConfig"),
        ("controlplaneMachineTelemetrySinkConfig", "TelemetrySinkConfig"),
        ("controlplaneMachineBillingConfig", "BillingConfig"),
        ("joinplaneRenewResponse", "RenewMachineResponse"),
    ],
)
def test_the_join_wire_schemas_name_the_fields_its_answers_carry(component: str, answer: str) -> None:
    # Given a hand-written levers9 JoinMachine schema and the TypedDict join_wire builds that answer as
    from typing import NotRequired, get_origin, get_type_hints

    from joinplane import join_views

    schema = DOCUMENT["components"]["schemas"][component]
    fields = get_type_hints(getattr(join_views, answer), include_extras=True)
    # Then both name the same fields, and the schema requires exactly those always present
    assert list(schema["properties"]) == list(fields)
    always = [name for name, hint in fields.items() if get_origin(hint) is not NotRequired]
    assert schema.get("required", []) == always
