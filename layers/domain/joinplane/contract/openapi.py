"""shared/openapi.json, generated: every route of the route table (joinplane.routes, which
template.yaml's HttpApi events are checked against), in the words of its row, its request schema,
and each answer it can give, from typed models.

Each dialect has its part: the operator API's operations are generated from the request models and
the views' TypedDicts (`operator_routes`, with `validators` for what a model's JSON Schema cannot
say); levers9's JoinMachine (`levers9`), Sylve's accept-join (`sylve`) and the verifiers' CRL and
bundle (`pki`) are written by hand as their contracts have them. This module puts them together.
The contract test (tests/contract/test_openapi_schemathesis.py) runs schemathesis with every check
against the local runtime; tests/contract/test_openapi.py keeps the committed file current.

Run `python -m joinplane.contract > shared/openapi.json` after changing a route, a model or a view.
Nothing a Lambda function runs imports this package (tests/architecture/test_layers.py).
"""

from __future__ import annotations

import json
from typing import Any

from joinplane import operator_api, views
from joinplane.contract import levers9, operator_routes, pki, sylve
from joinplane.contract.common import ERROR, GATEWAY_MESSAGE, JSON, TAGS, Schema, content, one_of_content
from joinplane.routes import API, Route

# How each of the table's authentications is declared (securitySchemes below). A join token may
# also travel in the body, so /machines/join's bearer is optional.
SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "api-key": [{"apiKey": []}],
    "join-token": [{}, {"joinToken": []}],
    "cluster-key": [{"clusterKey": []}],
    "none": [],
}


# API Gateway throttles before any function runs: the stage's token bucket for every route
# (template.yaml's ApiRateLimit/ApiBurstLimit), and a stricter one of its own for each route anyone
# can call. Its answer is the gateway's, whatever the route's dialect.
ROUTE_THROTTLES = {
    "/machines/join": "JoinRateLimit/JoinBurstLimit",
    "/machines/renew": "JoinRateLimit/JoinBurstLimit",
    "/crl/{caId}": "JoinRateLimit/JoinBurstLimit",
    "/bundle/{caId}": "JoinRateLimit/JoinBurstLimit",
    "/cluster/accept-join": "ClusterJoinRateLimit/ClusterJoinBurstLimit",
    "/api/cluster/accept-join": "ClusterJoinRateLimit/ClusterJoinBurstLimit",
}


def _throttled(path: str) -> str:
    route = ROUTE_THROTTLES.get(path)
    limits = (
        f"this route's own limit ({route}) or the stage's (ApiRateLimit/ApiBurstLimit, all routes together)"
        if route
        else "the stage's limit (ApiRateLimit/ApiBurstLimit, all routes together)"
    )
    return (
        f'Too Many Requests: API Gateway\'s `{{"message":"Too Many Requests"}}`, over {limits}, '
        "before any function runs; nothing was done. Retry with backoff."
    )


def routes() -> list[str]:
    """Every path this document describes: the route table's."""
    return sorted(route.path for route in API)


def _with_table_fields(operation: Schema, route: Route) -> Schema:
    """The operation with the table's operationId and security, placed where the document has
    always had them (the operator API's id after its description, the public contracts' after the summary)."""
    id_after = "description" if route.auth == "api-key" else "summary"
    placed: Schema = {}
    for key, value in operation.items():
        placed[key] = value
        if key == id_after:
            placed["operationId"] = route.operation
        if key == "description":
            placed["security"] = SECURITY[route.auth]
    return placed


def _operation(route: Route, components: operator_routes.Components) -> Schema:
    """The route's operation, by the dialect it speaks."""
    if route.auth == "api-key":
        return operator_routes.operation(route, components)
    if route.function == "MachineJoinFunction":
        return levers9.operation(route)
    if route.function == "ClusterJoinFunction":
        return sylve.operation(route)
    if route.operation in ("certificateAuthorities.crl", "certificateAuthorities.bundle"):
        return pki.operation(route)
    raise ValueError(f"no dialect documents {route}")


def document() -> dict[str, Any]:
    components = operator_routes.Components()
    components.schemas["Error"] = ERROR
    components.schemas["GatewayMessage"] = GATEWAY_MESSAGE
    paths: dict[str, Any] = {}
    for route in API:
        if not (route.summary and route.description and route.example is not None):
            raise ValueError(f"{route.method} {route.path}: its row in joinplane.routes needs words")
        operation = _operation(route, components)
        method = route.method.lower()
        responses = operation[method]["responses"]
        gateway = "#/components/schemas/GatewayMessage"
        if "429" in responses:  # the dialect's own RESOURCE_EXHAUSTED, or the gateway's throttle
            own = responses["429"]
            responses["429"] = {
                "description": f"{own['description']}; or {_throttled(route.path)}",
                "content": one_of_content(own["content"][JSON]["schema"]["$ref"], gateway),
            }
        else:
            responses["429"] = {"description": _throttled(route.path), "content": content(gateway)}
        operation[method]["responses"] = dict(sorted(responses.items()))
        paths[route.path] = {method: _with_table_fields(operation[method], route)}
    # AttestorReason is shared by join requests and dry-run join answers.
    components.add_view(views.AttestorReason)
    for name, schema in {**levers9.schemas(), **sylve.schemas()}.items():
        components.schemas[name] = schema
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Joinplane API",
            "version": "0.1.0",
            "description": "A serverless machine-join control plane. Three dialects, each byte for "
            "byte the published contract's: the operator API (`/api/compute/...`: RPC over POST, "
            "JSON bodies, "
            '`Authorization: Bearer jpk_...`, errors `{"error": {code, message, details}}`; bodies '
            f"over {operator_api.MAX_BODY_BYTES // 1024} KiB are 413 before parsing, unknown fields "
            "INVALID_ARGUMENT, and a JSON number that is a whole number is an integer); machine "
            "join and renew (levers9's JoinMachine, grpc-gateway JSON, `rpcStatus` errors); and "
            "Sylve's cluster accept-join. Integers are JSON numbers; timestamps RFC 3339 UTC with `Z`.",
        },
        "servers": [
            {"url": "http://127.0.0.1:3000", "description": "`make run`: the local runtime"},
            {
                "url": "https://{apiId}.execute-api.{region}.amazonaws.com",
                "description": "A deployed stack (`sam deploy`): the HttpApi's default endpoint",
                "variables": {
                    "apiId": {"default": "abcdef1234", "description": "the stack's HttpApi id"},
                    "region": {"default": "us-east-1"},
                },
            },
        ],
        "tags": [{"name": name, "description": text} for name, text in TAGS.values()],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(components.schemas.items())),
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "An API key, `jpk_...`"},
                "joinToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "/machines/join: the join token (`jpt_...`) instead of the body's "
                    "`joinToken`; both only if they are equal (else 400, code 3)",
                },
                "clusterKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Cluster-Key",
                    "description": "The pool's cluster key (`jck_...`, from clusters/rotateKey)",
                },
            },
        },
    }


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=False) + "\n"
