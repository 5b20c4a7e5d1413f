"""shared/openapi.json, generated: the template's routes, each with its request model's JSON Schema.

Run `python -m joinplane_local.openapi > shared/openapi.json` after changing a route or a model;
tests/integration/test_openapi.py fails while the committed document is stale or a route of
template.yaml has no entry here.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from joinplane import apikeys, audit, discovery, join_requests, machines, pools, tokens, tpm_allow
from joinplane.clusters import membership
from joinplane_local.template import Template, load

REQUESTS: dict[str, tuple[type[BaseModel], str]] = {
    "/api/compute/apiKeys/create": (
        apikeys.CreateApiKey,
        "Create an API key; the secret `key` is returned once.",
    ),
    "/api/compute/apiKeys/list": (apikeys.ListApiKeys, "List a tenant's API keys (never their secrets)."),
    "/api/compute/apiKeys/revoke": (
        apikeys.RevokeApiKey,
        "Revoke an API key; revoking again changes nothing.",
    ),
    "/api/compute/pools/create": (pools.CreatePool, "Create a compute pool (and its site, if new)."),
    "/api/compute/pools/get": (pools.PoolRef, "Get one pool."),
    "/api/compute/pools/list": (pools.ListPools, "List the pools the key can read, in poolId order."),
    "/api/compute/pools/update": (pools.UpdatePool, "Replace the given fields of an active pool."),
    "/api/compute/pools/archive": (pools.PoolRef, "Archive a pool: it refuses new joins and changes."),
    "/api/compute/joinTokens/create": (
        tokens.CreateJoinToken,
        "Create a join token; the secret `token` once.",
    ),
    "/api/compute/joinTokens/list": (tokens.ListJoinTokens, "List a pool's or a site's join tokens."),
    "/api/compute/joinTokens/revoke": (tokens.RevokeJoinToken, "Revoke a join token."),
    "/api/compute/joinRequests/list": (
        join_requests.ListJoinRequests,
        "List the join requests a pool can decide.",
    ),
    "/api/compute/joinRequests/approve": (
        join_requests.ApproveJoinRequest,
        "Approve a pending join request.",
    ),
    "/api/compute/joinRequests/reject": (join_requests.DecideJoinRequest, "Reject a join request."),
    "/api/compute/machines/list": (machines.ListMachines, "List a pool's machines."),
    "/api/compute/machines/get": (machines.MachineRef, "Get one machine."),
    "/api/compute/machines/revoke": (machines.RevokeMachine, "Revoke (ban) a machine."),
    "/api/compute/discovery/register": (discovery.RegisterEntry, "Register a machine the site expects."),
    "/api/compute/discovery/list": (discovery.ListEntries, "List a site's discovery inventory."),
    "/api/compute/discovery/remove": (discovery.RemoveEntry, "Remove a discovery entry."),
    "/api/compute/tpmAllowList/add": (tpm_allow.AddKey, "Allow a TPM endorsement key at a site."),
    "/api/compute/tpmAllowList/list": (tpm_allow.ListKeys, "List a site's allowed TPM endorsement keys."),
    "/api/compute/tpmAllowList/remove": (tpm_allow.RemoveKey, "Remove an allowed TPM endorsement key."),
    "/api/compute/auditEvents/list": (audit.ListAuditEvents, "List security events, newest first."),
    "/api/compute/clusters/rotateKey": (
        membership.RotateClusterKey,
        "Make the pool a cluster, or rotate its key.",
    ),
    "/api/compute/clusters/nodes/list": (membership.ListClusterNodes, "List a cluster's member nodes."),
    "/api/compute/clusters/guests/list": (
        membership.ListClusterGuests,
        "List a cluster's guest-ID registry.",
    ),
}

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {
                    "type": "string",
                    "enum": [
                        "INVALID_ARGUMENT",
                        "UNAUTHENTICATED",
                        "PERMISSION_DENIED",
                        "NOT_FOUND",
                        "ALREADY_EXISTS",
                        "INVALID_STATE",
                        "PAYLOAD_TOO_LARGE",
                        "RESOURCE_EXHAUSTED",
                        "INTERNAL",
                        "UNAVAILABLE",
                    ],
                },
                "message": {"type": "string"},
                "details": {"type": "array", "items": {"type": "object"}},
            },
        }
    },
}


def routes() -> list[str]:
    """The operator routes (`/api/compute/...`). The machine-facing routes speak the seeds' own
    dialects and are documented by the seeds themselves."""
    template = Template(load())
    found = []
    for resource in template.of_type("AWS::Serverless::Function").values():
        for event in resource.get("Properties", {}).get("Events", {}).values():
            if event.get("Type") == "HttpApi" and event["Properties"]["Path"].startswith("/api/compute/"):
                found.append(event["Properties"]["Path"])
    return sorted(found)


def document() -> dict[str, Any]:
    components: dict[str, Any] = {"Error": ERROR}
    paths: dict[str, Any] = {}
    for path in routes():
        if path not in REQUESTS:
            continue
        model, summary = REQUESTS[path]
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
        errors = {
            str(status): {
                "description": code,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
            for status, code in [
                (400, "INVALID_ARGUMENT"),
                (401, "UNAUTHENTICATED"),
                (403, "PERMISSION_DENIED"),
                (404, "NOT_FOUND"),
                (409, "ALREADY_EXISTS or INVALID_STATE"),
                (413, "PAYLOAD_TOO_LARGE"),
            ]
        }
        paths[path] = {
            "post": {
                "summary": summary,
                "operationId": path.removeprefix("/api/compute/").replace("/", "."),
                "security": [{"apiKey": []}],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
                    },
                },
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **errors,
                },
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Joinplane operator API",
            "version": "0.1.0",
            "description": "RPC over POST: JSON bodies, `Authorization: Bearer jpk_...`. Bodies over 64 KiB "
            "are refused with 413 before parsing; unknown fields are INVALID_ARGUMENT.",
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
    }


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    print(render(), end="")
