"""What every part of the OpenAPI document shares: the operator API's error envelope, API
Gateway's own answer, the tags, and the small builders each dialect's operations use."""

from __future__ import annotations

import re
from typing import Any

from joinplane import errors, operator_api

Schema = dict[str, Any]
REF = "#/components/schemas/{model}"
JSON = "application/json"

# The document's tags, by key: an operator route's family (its first segment after /api/compute),
# then the two contracts' own.
TAGS = {
    "apiKeys": ("API keys", "Keys for the operator API; each carries grants `PERMISSION@SCOPE`."),
    "pools": ("Pools", "Compute pools: where machines land, and the bootstrap they are handed."),
    "joinTokens": ("Join tokens", "Secrets that let machines ask to join one pool or one site."),
    "joinRequests": (
        "Join requests",
        "The approval queue for deferred joins (the compute platform's joinRequests API).",
    ),
    "machines": ("Machines", "Admitted machines: list, inspect, revoke."),
    "discovery": ("Discovery", "A site's inventory of expected machines (the `discovery` attestor)."),
    "tpmAllowList": ("TPM allow-lists", "TPM endorsement keys a site expects (the `tpm` attestor)."),
    "auditEvents": ("Audit", "Every security event, as published on EventBridge."),
    "certificateAuthorities": (
        "Certificate authorities",
        "Each pool's CA: a KMS key that never leaves KMS, its rotation and the trust bundle.",
    ),
    "clusters": ("Clusters", "Cluster keys, members and the guest-identity registry (Sylve's accept-join)."),
    "join": ("Machine join (levers9)", "What a machine agent calls: levers9's grpc-gateway JSON."),
    "cluster": ("Cluster join (Sylve)", "What a Sylve node calls on its leader."),
}


OPERATOR_CODES = [
    "INVALID_ARGUMENT",
    "FAILED_PRECONDITION",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "INVALID_STATE",
    "ABORTED",
    "PAYLOAD_TOO_LARGE",
    "RESOURCE_EXHAUSTED",
    "INTERNAL",
    "UNAVAILABLE",
]
assert set(OPERATOR_CODES) == set(operator_api.STATUS)

ERROR: Schema = {
    "type": "object",
    "description": "The operator API's error envelope.",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "reason", "message", "details"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "string", "enum": OPERATOR_CODES},
                "reason": {
                    "type": "string",
                    "enum": sorted(errors.CATALOGUE),
                    "description": "Which refusal this is, stable across releases (docs/join.md, "
                    '"Refusal reasons"); switch on it, not on `message`.',
                },
                "message": {"type": "string"},
                "details": {
                    "type": "array",
                    "description": "`{field, reason}` per invalid field; `{reason: out_of_time, "
                    "retryAfterSeconds}` on a 503 that says when to retry.",
                    "items": {"type": "object"},
                },
            },
        }
    },
}

GATEWAY_MESSAGE: Schema = {
    "type": "object",
    "description": "API Gateway's own answer, given before any function runs (e.g. 401 "
    "`Unauthorized` when the request has no `Authorization` header for the authorizer to read, 429 "
    "`Too Many Requests` over a throttle).",
    "required": ["message"],
    "additionalProperties": False,
    "properties": {"message": {"type": "string", "examples": ["Unauthorized", "Too Many Requests"]}},
}

RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying (an answer given when the invocation ran "
        "out of time: nothing was written).",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    }
}


# API Gateway throttles before any function runs: the stage's token bucket for every route


def content(ref: str) -> Schema:
    return {JSON: {"schema": {"$ref": ref}}}


def one_of_content(*refs: str) -> Schema:
    return {JSON: {"schema": {"oneOf": [{"$ref": ref} for ref in refs]}}}


def nullable(schema: Schema) -> Schema:
    """proto3 JSON and Go's encoding/json alike: `null` is the field's default."""
    return {"anyOf": [schema, {"type": "null"}]}


def ecma(pattern: str) -> str:
    """A Python pattern as ECMA-262 (JSON Schema's dialect): no named groups."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


def operator_errors() -> Schema:
    error = "#/components/schemas/Error"
    gateway = "#/components/schemas/GatewayMessage"
    return {
        "400": {"description": "INVALID_ARGUMENT or FAILED_PRECONDITION", "content": content(error)},
        "401": {
            "description": "UNAUTHENTICATED (an unknown, malformed or revoked key); API Gateway's "
            '`{"message":"Unauthorized"}` when there is no `Authorization` header at all',
            "content": one_of_content(error, gateway),
        },
        "403": {"description": "PERMISSION_DENIED", "content": content(error)},
        "404": {"description": "NOT_FOUND: absent, or out of the key's sight", "content": content(error)},
        "409": {
            "description": "ALREADY_EXISTS, INVALID_STATE, or ABORTED (`CONCURRENT_CHANGE`: a lost race, "
            "nothing written; retry)",
            "content": content(error),
        },
        "413": {
            "description": f"PAYLOAD_TOO_LARGE: a body over {operator_api.MAX_BODY_BYTES} bytes",
            "content": content(error),
        },
        "500": {"description": "INTERNAL", "content": one_of_content(error, gateway)},
        "503": {
            "description": "UNAVAILABLE: retry (with `Retry-After` when the invocation ran out of time)",
            "headers": RETRY_AFTER,
            "content": one_of_content(error, gateway),
        },
    }
