"""shared/openapi.json, generated: every route of the route table (joinplane.routes, which
template.yaml's HttpApi events are checked against), its request schema, and each answer it can
give, from typed models.

- Operator routes (`/api/compute/...`): the request schema is the route's own (strict) request
  model; the 200 answer is its TypedDict view in `joinplane.views` (the type the domain's view
  functions return); both are named by the table. Errors are the operator envelope, and API
  Gateway's own `{"message": ...}` where the gateway answers before a function runs (no
  `Authorization` header: 401).
- `/machines/join`, `/machines/renew`: levers9 JoinMachine's schemas (grpc-gateway JSON, `rpcStatus` errors)
  plus the additive fields docs/join.md lists.
- `/cluster/accept-join` (and Sylve's `/api/cluster/accept-join`): Sylve accept-join's request and
  Sylve's `{status, message, error, data}` envelope.

What a pydantic model cannot say in JSON Schema (a validator's rule: "exactly one of poolId or
siteId", "not a placeholder serial", a grant's grammar) is added here from the same constants the
validators use, so the document promises exactly what the server accepts. The contract test
(tests/contract/test_openapi_schemathesis.py) runs schemathesis with every check against the local
runtime; tests/contract/test_openapi.py keeps the committed file current.

Run `python -m joinplane_local.openapi > shared/openapi.json` after changing a route, a model or a
view.
"""

from __future__ import annotations

import copy
import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter

from joinplane import (
    errors,
    grants,
    hardware,
    ids,
    join_requests,
    join_wire,
    machines,
    operator_api,
    proof,
    views,
)
from joinplane.clusters import sylve_wire
from joinplane.routes import API, Route

Schema = dict[str, Any]
REF = "#/components/schemas/{model}"
JSON = "application/json"

# --- the operator API --------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    """What the route table (joinplane.routes) does not say about an operator route: its prose
    and an example request. Keyed by operationId; every operator route has one."""

    summary: str
    description: str
    example: dict[str, Any]


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

EXAMPLE_TOKEN_ID = "jtok_01m8nz6smg0chzvz0b58z6hma5"
EXAMPLE_REQUEST_ID = "jreq_01m8nz6t2rrm70af48hhs5f7zx"
EXAMPLE_MACHINE_ID = "mach_01m8nz6v0d5q3h2k9w7x4c1b8e"
EXAMPLE_MACHINE_TOKEN = "jpm_01m8nz6v0d5q3h2k9w7x4c1b8e_5ycq0x3m8k2h7p1d9w4r6t0v2b8n3s5f"
EXAMPLE_EK = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
# A TPM manufacturer's root as a site lists it (self-signed CA, P-256, valid until 2046).
EXAMPLE_TPM_ROOT = (
    "-----BEGIN CERTIFICATE-----\n"
    "MIIB2jCCAX+gAwIBAgIUI25eB8pk2TdkIXsQLyunoPF21dEwCgYIKoZIzj0EAwIw\n"
    "OjEaMBgGA1UECgwRRXhhbXBsZSBUUE0gbWFrZXIxHDAaBgNVBAMME0V4YW1wbGUg\n"
    "VFBNIFJvb3QgQ0EwHhcNMjYxMjAyMDAxMDI4WhcNNDYxMTI3MDAxMDI4WjA6MRow\n"
    "GAYDVQQKDBFFeGFtcGxlIFRQTSBtYWtlcjEcMBoGA1UEAwwTRXhhbXBsZSBUUE0g\n"
    "Um9vdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABENb5x4ClRfYbMDZZG0k\n"
    "bVrLMJy+Lvb0NogBMxsdyU2WRBLiAqEVBawyNuZPKtzCjwa9G5nFQEFFGCTEc/Y4\n"
    "LWWjYzBhMB0GA1UdDgQWBBT4cgELnlQAn5xIkWoUSX7wrHQi2DAfBgNVHSMEGDAW\n"
    "gBT4cgELnlQAn5xIkWoUSX7wrHQi2DAPBgNVHRMBAf8EBTADAQH/MA4GA1UdDwEB\n"
    "/wQEAwIBBjAKBggqhkjOPQQDAgNJADBGAiEA7mhbO+S9EDyHIYMTGEFGoCzth7Wt\n"
    "MaoCoIi2ShlXAfkCIQD8MTao02tlQHnoEPnWlS5ItjAu5kyh+XR5Zuh0Dz5Hfw==\n"
    "-----END CERTIFICATE-----\n"
)

DOCS: dict[str, Doc] = {
    "apiKeys.create": Doc(
        "Create an API key",
        "The secret `key` is returned once; only its SHA-256 is stored. A key may hand out only "
        "grants it holds itself (`PERMISSION_DENIED` otherwise).",
        {"tenantId": "dev", "grants": ["compute:join-tokens:*@compute-pool/dev-pool"], "description": "ci"},
    ),
    "apiKeys.list": Doc(
        "List API keys",
        "A tenant's API keys, never their secrets, in keyId order.",
        {"tenantId": "dev", "limit": 50},
    ),
    "apiKeys.revoke": Doc(
        "Revoke an API key",
        "Revoking again changes nothing. A key may revoke only keys whose every grant it holds.",
        {"tenantId": "dev", "keyId": "key_01m8p0000000000000000000ab"},
    ),
    "apiKeys.whoami": Doc(
        "Tell the calling key about itself",
        "The API key in the `Authorization` header: its id, tenant, grants, description and state, "
        "never its secret. Any valid key may ask; no grant is needed. The body is `{}`. A key "
        "revoked moments ago is `UNAUTHENTICATED` here even while the gateway still caches it.",
        {},
    ),
    "pools.create": Doc(
        "Create a compute pool",
        "Creates the site too if it is new. Placing a pool in a site needs `compute:pools:write` at "
        "that site (or wider).",
        {
            "tenantId": "dev",
            "siteId": "dev-site",
            "poolId": "gpu-west",
            "name": "GPU west",
            "workspaceId": "ws-1",
            "bootstrap": {"controlplaneHttpUrl": "https://cp.example.com", "workerImage": "worker:1.4"},
        },
    ),
    "pools.get": Doc(
        "Get a pool",
        "One pool.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    "pools.list": Doc(
        "List pools",
        "The pools the key can read, in poolId order; `nextCursor` continues.",
        {"tenantId": "dev", "state": "active"},
    ),
    "pools.update": Doc(
        "Update a pool",
        "The fields given replace the stored value whole; absent fields are left alone. Only "
        "`cluster` can be removed (null); an archived pool is `INVALID_STATE`.",
        {"tenantId": "dev", "poolId": "dev-pool", "bootstrap": {"workerImage": "worker:1.5"}},
    ),
    "pools.archive": Doc(
        "Archive a pool",
        "An archived pool refuses new joins and changes; archiving again changes nothing.",
        {"tenantId": "dev", "poolId": "old-pool"},
    ),
    "joinTokens.create": Doc(
        "Create a join token",
        "For exactly one of `poolId` (a pool token) or `siteId` (a site token: every join is "
        "deferred until a pool claims it). The secret `token` is returned once.",
        {"tenantId": "dev", "poolId": "dev-pool", "ttlSeconds": 3600, "maxUses": 5, "requireApproval": True},
    ),
    "joinTokens.list": Doc(
        "List join tokens",
        "A pool's (`poolId`) or a site's (`siteId`) join tokens, never their secrets.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    "joinTokens.revoke": Doc(
        "Revoke a join token",
        "Revoking again changes nothing.",
        {"tenantId": "dev", "tokenId": EXAMPLE_TOKEN_ID},
    ),
    "joinRequests.list": Doc(
        "List join requests",
        "With `poolId`: the requests that pool can decide, its own and its site's that no pool has "
        "claimed. Without: the queue across pools, every request of every pool of the tenant the key "
        "may read (`compute:join-tokens:read`) and the unclaimed requests of those pools' sites, each "
        "once; each item names its `poolId` (null while unclaimed) and `siteId`. Oldest first "
        "(by requestId); a pending or approved request past its expiry reads as `expired`.",
        {"tenantId": "dev", "state": "pending", "limit": 50},
    ),
    "joinRequests.get": Doc(
        "Get a join request",
        "One request by its id. Without `poolId` it is read through its own pool, or, while no pool "
        "has claimed it, through an active pool of its site the key may read; `NOT_FOUND` when the "
        "key sees neither.",
        {"tenantId": "dev", "requestId": EXAMPLE_REQUEST_ID},
    ),
    "joinRequests.approve": Doc(
        "Approve a join request",
        "Assigns it to the pool with a new expiry of `ttlSeconds`; the machine's retry with the "
        "same key consumes it. Approving again for this pool returns the approval unchanged. "
        "`poolId` may be left out for a request a pool has already claimed (it is decided against "
        "that pool); a site's unclaimed request needs it, since approving claims it for that pool "
        "(`INVALID_ARGUMENT` on `poolId` otherwise, its detail listing the pools the key may choose).",
        {"tenantId": "dev", "poolId": "dev-pool", "requestId": EXAMPLE_REQUEST_ID, "reason": "rack 7"},
    ),
    "joinRequests.reject": Doc(
        "Reject a join request",
        "Rejects a pending request or withdraws an unused approval; rejecting again changes nothing. "
        "Without `poolId` the request is decided against its own pool, or, unclaimed, against any "
        "active pool of its site on which the key holds `compute:join-tokens:create`; it stays "
        "unclaimed.",
        {"tenantId": "dev", "requestId": EXAMPLE_REQUEST_ID, "reason": "unknown box"},
    ),
    "machines.list": Doc(
        "List machines",
        "A pool's machines in machineId order.",
        {"tenantId": "dev", "poolId": "dev-pool", "state": "active"},
    ),
    "machines.get": Doc(
        "Get a machine",
        "One machine.",
        {"tenantId": "dev", "machineId": EXAMPLE_MACHINE_ID},
    ),
    "machines.revoke": Doc(
        "Revoke a machine",
        "Bans it: its machine token and re-joins stop working, its hardware ids are released, and "
        "its key cannot join again.",
        {"tenantId": "dev", "machineId": EXAMPLE_MACHINE_ID, "reason": "decommissioned"},
    ),
    "discovery.register": Doc(
        "Register an expected machine",
        "At least one identifier; each is stored canonical, and placeholder values (firmware "
        "defaults such as `To be filled by O.E.M.`, all-zero UUIDs, broadcast MACs) are refused.",
        {
            "tenantId": "dev",
            "siteId": "dev-site",
            "serialNumber": "SN-7Q2X9",
            "macAddresses": ["3c:ec:ef:12:34:56"],
            "hostname": "gpu-01",
        },
    ),
    "discovery.list": Doc(
        "List a site's discovery inventory",
        "Entries oldest first.",
        {"tenantId": "dev", "siteId": "dev-site"},
    ),
    "discovery.remove": Doc(
        "Remove a discovery entry",
        "Returns the entry removed.",
        {"tenantId": "dev", "siteId": "dev-site", "entryId": "disc_01m8nz6w3a9c8d7e6f5g4h3j2k"},
    ),
    "tpmAllowList.add": Doc(
        "Allow a TPM endorsement key",
        "Exactly one of `ekPublicKeySha256` (hex SHA-256 of the EK's SubjectPublicKeyInfo) or "
        "`ekCertificatePem` (the EK certificate; the hash is taken from it).",
        {"tenantId": "dev", "siteId": "dev-site", "ekPublicKeySha256": EXAMPLE_EK},
    ),
    "tpmAllowList.list": Doc(
        "List a site's allowed endorsement keys",
        "In hash order.",
        {"tenantId": "dev", "siteId": "dev-site"},
    ),
    "tpmAllowList.remove": Doc(
        "Remove an allowed endorsement key",
        "Returns the entry removed.",
        {"tenantId": "dev", "siteId": "dev-site", "ekPublicKeySha256": EXAMPLE_EK},
    ),
    "tpmAllowList.manufacturers.add": Doc(
        "List a TPM manufacturer's CA certificate",
        "A root (self-signed) or an intermediate that completes a chain to one. Tokens with "
        "`attestation.tpmTrust: manufacturer` admit activated EKs whose certificate chains to a listed "
        "root (docs/tpm.md).",
        {"tenantId": "dev", "siteId": "dev-site", "certificatePem": EXAMPLE_TPM_ROOT},
    ),
    "tpmAllowList.manufacturers.list": Doc(
        "List a site's TPM manufacturer certificates",
        "In the order of their certificates' SHA-256.",
        {"tenantId": "dev", "siteId": "dev-site"},
    ),
    "tpmAllowList.manufacturers.remove": Doc(
        "Remove a TPM manufacturer certificate",
        "Returns the certificate removed.",
        {"tenantId": "dev", "siteId": "dev-site", "certificateSha256": EXAMPLE_EK},
    ),
    "auditEvents.list": Doc(
        "List security events",
        "Newest first. With `poolId`, the pool's events (a pool-scoped key suffices); without, the tenant's.",
        {"tenantId": "dev", "poolId": "dev-pool", "detailType": "security.machine.joined"},
    ),
    "clusters.rotateKey": Doc(
        "Make the pool a cluster, or rotate its key",
        "Issues a new cluster key (`jck_...`, returned once); the previous one stops working.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    "certificateAuthorities.get": Doc(
        "Read a pool's certificate authorities",
        "The rotation's phases: the active CA, the prepared `next` one (with when it signs), the "
        "retired ones (with when they leave the bundle), the bundle machines and verifiers should "
        "trust (active first, then the prepared CA, then retired CAs whose certificates may still be "
        "valid) and its public `bundleUrl`. Makes the pool's first CA (a KMS key) if it has none yet, "
        "as its first join would. Needs `compute:pools:read`.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    "certificateAuthorities.rotate": Doc(
        "Rotate a pool's certificate authority",
        "Prepares a new KMS key and CA: it joins the bundle at once (join and renew answers, get, the "
        "public bundle URL) and signs nothing until the pool's `caPropagationSeconds` (default a day) "
        "have passed or `activate` is called; then the previous CA is retired and stays in the bundle "
        "until every certificate it issued has expired, when its key is scheduled for deletion. "
        "`emergency: true` (a key suspected) makes the new CA sign at once, and the answer's `breaks` "
        "says what that breaks. INVALID_STATE (CA_ROTATION_PREPARED) while a CA is prepared; ABORTED "
        "when another rotation of the pool won meanwhile. Needs `compute:pools:write`.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    "certificateAuthorities.activate": Doc(
        "Make the prepared CA sign now",
        "The pool's prepared CA (from rotate or importCertificate) signs from now on, before its "
        "propagation period has ended; the active CA is retired. `caId`, when given, must be the "
        "prepared CA. Verifiers that have not fetched the bundle since the rotation reject the new "
        "CA's certificates. FAILED_PRECONDITION (NO_PREPARED_CA) when none is prepared. Needs "
        "`compute:pools:write`.",
        {"tenantId": "dev", "poolId": "dev-pool", "caId": "ca_01m8nz6smg0chzvz0b58z6hma5"},
    ),
    "certificateAuthorities.createCsr": Doc(
        "Ask for a pool CA signed by your own root",
        "Makes a new KMS key for the pool and returns a PKCS#10 request for it: have your CA sign it as "
        "an intermediate (CA:TRUE, pathlen:0, keyCertSign and cRLSign, a subjectKeyIdentifier) and import "
        "the result with importCertificate. The pool keeps issuing from its active CA meanwhile; a newer "
        "request replaces a pending one (its key is scheduled for deletion). Needs `compute:pools:write`.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    "certificateAuthorities.importCertificate": Doc(
        "Install the signed intermediate as the pool's CA",
        "The certificate your CA signed for the pending request, and its chain (issuer first, root "
        "last). It must be for the pending key, a CA allowed to sign certificates and CRLs, chain to a "
        "self-signed root, and stay valid at least 30 days; otherwise 400 and nothing changes. It is "
        "prepared as by a rotation (in the bundle, signing after the pool's propagation period or "
        "activate); a pool without a CA signs with it at once. Needs `compute:pools:write`.",
        {
            "tenantId": "dev",
            "poolId": "dev-pool",
            "certificate": "-----BEGIN CERTIFICATE-----...",
            "chain": ["-----BEGIN CERTIFICATE-----..."],
        },
    ),
    "clusters.nodes.list": Doc(
        "List a cluster's member nodes",
        "In nodeId order.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    "clusters.guests.list": Doc(
        "List a cluster's guest-ID registry",
        "Claims in guestId order, optionally of one node.",
        {"tenantId": "dev", "poolId": "dev-pool", "nodeId": "node-a"},
    ),
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


def _content(ref: str) -> Schema:
    return {JSON: {"schema": {"$ref": ref}}}


def _one_of_content(*refs: str) -> Schema:
    return {JSON: {"schema": {"oneOf": [{"$ref": ref} for ref in refs]}}}


def _operator_errors() -> Schema:
    error = "#/components/schemas/Error"
    gateway = "#/components/schemas/GatewayMessage"
    return {
        "400": {"description": "INVALID_ARGUMENT or FAILED_PRECONDITION", "content": _content(error)},
        "401": {
            "description": "UNAUTHENTICATED (an unknown, malformed or revoked key); API Gateway's "
            '`{"message":"Unauthorized"}` when there is no `Authorization` header at all',
            "content": _one_of_content(error, gateway),
        },
        "403": {"description": "PERMISSION_DENIED", "content": _content(error)},
        "404": {"description": "NOT_FOUND: absent, or out of the key's sight", "content": _content(error)},
        "409": {
            "description": "ALREADY_EXISTS, INVALID_STATE, or ABORTED (`CONCURRENT_CHANGE`: a lost race, "
            "nothing written; retry)",
            "content": _content(error),
        },
        "413": {
            "description": f"PAYLOAD_TOO_LARGE: a body over {operator_api.MAX_BODY_BYTES} bytes",
            "content": _content(error),
        },
        "500": {"description": "INTERNAL", "content": _one_of_content(error, gateway)},
        "503": {
            "description": "UNAVAILABLE: retry (with `Retry-After` when the invocation ran out of time)",
            "headers": RETRY_AFTER,
            "content": _one_of_content(error, gateway),
        },
    }


# --- what the validators say that the models' JSON Schema does not -----------------------------


def _ecma(pattern: str) -> str:
    """A Python pattern as ECMA-262 (JSON Schema's dialect): no named groups."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


def _either(*names: str) -> Callable[[Schema], None]:
    """Exactly one of `names`, given as a string (null counts as absent)."""

    def patch(schema: Schema) -> None:
        schema["oneOf"] = [{"required": [name], "properties": {name: {"type": "string"}}} for name in names]

    return patch


def _no_null(*keep: str) -> Callable[[Schema], None]:
    """Optional fields that may be left out but not set to null (`pools/update`)."""

    def patch(schema: Schema) -> None:
        for name, prop in schema["properties"].items():
            if name in keep or "anyOf" not in prop:
                continue
            options = [o for o in prop.pop("anyOf") if o != {"type": "null"}]
            prop.pop("default", None)
            if len(options) == 1:
                prop.update(options[0])
            else:
                prop["anyOf"] = options

    return patch


def _grants(schema: Schema) -> None:
    schema["properties"]["grants"]["items"] = {
        "type": "string",
        "pattern": _ecma(grants.GRANT_PATTERN),
        "examples": ["compute:join-tokens:*@compute-pool/dev-pool", "compute:*@tenant"],
    }


_SEP = r"[\s._/\\-]*"


def _squashed(word: str) -> str:
    """A pattern for `word` as hardware._squash compares it: any case, any separators between."""
    return _SEP.join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _placeholder_serials() -> Schema:
    words = sorted(hardware._PLACEHOLDER_SERIALS | hardware._COUNTING_SERIALS)
    alternatives = "|".join(_squashed(word) for word in words)
    return {
        "anyOf": [
            {"pattern": rf"^{_SEP}(?:{alternatives}){_SEP}$"},
            # What normalize_serial refuses besides: C1 control characters.
            {"pattern": "[\u0080-\u009f]"},
            # One repeated character (any case), or nothing but separators.
            {"pattern": rf"^{_SEP}(?:([^\s._/\\-]){_SEP}(?:\1{_SEP})*)?$"},
        ]
    }


def _register_entry(schema: Schema) -> None:
    props = schema["properties"]
    serial = props["serialNumber"]["anyOf"][0]
    serial["not"] = _placeholder_serials()
    serial["description"] = "Not a placeholder (firmware default, counting run, one repeated character)."
    uuid = props["systemUuid"]["anyOf"][0]
    hexadecimal = (
        r"(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{32})"
    )
    uuid["pattern"] = rf"^\s*(?:\{{{hexadecimal}\}}|{hexadecimal})\s*$"
    placeholders = "|".join(
        "-?".join("".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in part) for part in u.split("-"))
        for u in sorted(hardware._PLACEHOLDER_UUID_SET)
    )
    uuid["not"] = {
        "anyOf": [
            {"pattern": rf"^\s*\{{?(?:{placeholders})\}}?\s*$"},
            {"pattern": r"^\s*\{?([0-9a-fA-F])(?:-?\1)*\}?\s*$"},
        ]
    }
    uuid["description"] = "8-4-4-4-12 or 32 hexadecimal digits (braces allowed); not a firmware placeholder."
    mac = props["macAddresses"]["items"]
    mac["pattern"] = (
        r"^\s*(?:[0-9a-fA-F][02468aceACE](?::[0-9a-fA-F]{2}){5}|[0-9a-fA-F][02468aceACE](?:-[0-9a-fA-F]{2}){5}"
        r"|[0-9a-fA-F][02468aceACE][0-9a-fA-F]{10})\s*$"
    )
    mac["description"] = "A unicast address (`:`, `-` or no separators); not all-zero or 02:00:00:00:00:00."
    mac["not"] = {"pattern": r"^\s*(?:00[:-]?){5}00\s*$|^\s*02(?:[:-]?00){5}\s*$"}
    schema["anyOf"] = [
        {"required": ["serialNumber"], "properties": {"serialNumber": {"type": "string"}}},
        {"required": ["systemUuid"], "properties": {"systemUuid": {"type": "string"}}},
        {"required": ["macAddresses"], "properties": {"macAddresses": {"minItems": 1}}},
        {"required": ["machineFingerprint"], "properties": {"machineFingerprint": {"type": "string"}}},
    ]


def _add_key(schema: Schema) -> None:
    _either("ekPublicKeySha256", "ekCertificatePem")(schema)
    pem = schema["properties"]["ekCertificatePem"]["anyOf"][0]
    pem["pattern"] = r"^\s*-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\s]*-----END CERTIFICATE-----\s*$"
    pem["description"] = "One PEM CERTIFICATE block holding a DER X.509 certificate."


def _add_manufacturer(schema: Schema) -> None:
    pem = schema["properties"]["certificatePem"]
    pem["pattern"] = r"^\s*-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\s]*-----END CERTIFICATE-----\s*$"
    pem["description"] = (
        "One PEM CERTIFICATE block: a CA certificate (basicConstraints cA true, or none), unexpired."
    )


REQUEST_PATCHES: dict[str, Callable[[Schema], None]] = {
    "CreateApiKey": _grants,
    "CreateJoinToken": _either("poolId", "siteId"),
    "ListJoinTokens": _either("poolId", "siteId"),
    "AddKey": _add_key,
    "AddManufacturer": _add_manufacturer,
    "UpdatePool": _no_null("tenantId", "poolId", "cluster"),
    "RegisterEntry": _register_entry,
}


# --- levers9's JoinMachine: /machines/join and /machines/renew ---------------------------------


def _nullable(schema: Schema) -> Schema:
    """proto3 JSON: `null` is the field's default."""
    return {"anyOf": [schema, {"type": "null"}]}


INT64 = {
    "anyOf": [
        {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
        {"type": "string", "pattern": r"^-?[0-9]{1,18}$"},
    ],
    "description": "int64: a JSON number or a decimal string (proto3 JSON)",
}
UINT64 = {
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": 2**64 - 1},
        {"type": "string", "pattern": r"^[0-9]{1,19}$"},
    ],
    "description": "uint64: a decimal string (or a JSON number), as grpc-gateway writes it",
}


def _string(limit: int = join_wire.MAX_STRING) -> Schema:
    return {"type": "string", "maxLength": limit}


def _strings() -> Schema:
    return {"type": "array", "maxItems": join_wire.MAX_ITEMS, "items": _string()}


def _object(
    properties: dict[str, Schema], description: str = "", required: list[str] | None = None
) -> Schema:
    schema: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    if description:
        schema["description"] = description
    return schema


def _join_request() -> Schema:
    p = _nullable
    properties: dict[str, Schema] = {
        "joinToken": p(
            {
                **_string(),
                "description": "The join token (`jpt_...`); or send it as `Authorization: Bearer` "
                "(both only if they are equal).",
            }
        ),
        "machineFingerprint": p(
            {**_string(), "description": "The join identity when there is no `csr` (no certificate then)."}
        ),
        "hostname": p(_string()),
        "os": p(_string()),
        "arch": p(_string()),
        "cpuCount": p(INT64),
        "memoryMb": p(UINT64),
        "gpu": p(_strings()),
        "gpuCount": p(INT64),
        "preflight": p(
            {
                "type": "array",
                "maxItems": join_wire.MAX_ITEMS,
                "items": {"$ref": "#/components/schemas/controlplaneMachinePreflightCheck"},
            }
        ),
        "schedulable": p({"type": "boolean", "description": "Absent means true."}),
        "executor": p(_string()),
        "cpuMillicores": p(INT64),
        "gpuIds": p(_strings()),
        "networkSlotPoolSize": p(INT64),
        "containerStartConcurrency": p(INT64),
        "workerImage": p(
            {
                **_string(),
                "description": "Optional per-machine worker image override. The first value a "
                "machine sends is its baseline; sending the baseline (or nothing) follows the pool's "
                "image, anything else is pinned.",
            }
        ),
        "capabilities": p(_strings()),
        # Joinplane's additive fields (docs/join.md).
        "csr": p(
            {
                **_string(join_wire.MAX_PEM),
                "description": "Joinplane: a PEM PKCS#10 CSR (ECDSA P-256/P-384, Ed25519, RSA "
                "2048-4096). Its SubjectPublicKeyInfo is the join identity; the certificate is "
                "issued for its key.",
            }
        ),
        "hardware": p({"$ref": "#/components/schemas/joinplaneHardware"}),
        "tpm": p({"$ref": "#/components/schemas/joinplaneTpm"}),
        "awsIam": p({"$ref": "#/components/schemas/joinplaneAwsIam"}),
        "dryRun": p({"type": "boolean", "description": "Joinplane: evaluate everything, change nothing."}),
    }
    return _object(
        properties,
        "levers9's `controlplaneJoinMachineRequest` plus Joinplane's additive fields (`csr`, "
        "`hardware`, `tpm`, `awsIam`, `dryRun`). Fields may also be named by their proto names "
        "(`cpu_count`), not both; unknown fields are refused (code 3).",
    )


def _base64(limit: int) -> Schema:
    return {
        "type": "string",
        "maxLength": 4 * ((limit + 2) // 3),
        "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
    }


def _join_schemas() -> dict[str, Schema]:
    p = _nullable
    sink = "#/components/schemas/controlplaneMachineTelemetrySinkConfig"
    string = {"type": "string"}
    return {
        "controlplaneJoinMachineRequest": _join_request(),
        "controlplaneMachinePreflightCheck": _object(
            {
                "name": p(_string()),
                "ok": p({"type": "boolean"}),
                "message": p(_string(1024)),
                "severity": p(
                    {**_string(), "description": "`fatal` refuses the join; `error` admits it unschedulable"}
                ),
            }
        ),
        "joinplaneHardware": _object(
            {
                "serialNumber": p(_string()),
                "systemUuid": p(_string()),
                "macAddresses": p(_strings()),
            },
            "Joinplane: hardware identifiers (placeholders defer the join; one another active "
            "machine holds denies it).",
        ),
        "joinplaneTpm": _object(
            {
                "ekPublicKeySha256": p(
                    {
                        "type": "string",
                        "pattern": "^(?:[0-9a-fA-F]{64})?$",
                        "description": "hex SHA-256 of the EK's SubjectPublicKeyInfo",
                    }
                ),
                "ekCertificatePem": p(_string(join_wire.MAX_PEM)),
                "ekPublic": p(
                    {
                        **_base64(1024),
                        "description": "base64 of the EK's TPM2B_PUBLIC (`tpm2_createek -u`); with "
                        "`akPublic`, the join is challenged to activate a credential (docs/tpm.md)",
                    }
                ),
                "akPublic": p(
                    {**_base64(1024), "description": "base64 of the AK's TPM2B_PUBLIC (`tpm2_createak -u`)"}
                ),
                "activation": p({"$ref": "#/components/schemas/joinplaneTpmActivation"}),
            },
            "Joinplane: the TPM endorsement key, by hash or by certificate; with `ekPublic` and "
            "`akPublic`, proved by credential activation (docs/tpm.md). An EK not activated counts "
            "as no TPM.",
        ),
        "joinplaneAwsIam": _object(
            {
                "tokenId": p({"type": "string", "pattern": "^jtok_[0-9a-hjkmnp-tv-z]{26}$"}),
                "headers": p(
                    {
                        "type": "object",
                        "maxProperties": 16,
                        "additionalProperties": {"type": "string", "maxLength": 4096},
                        "description": "the signed request's headers: Authorization (SigV4), Host, "
                        "X-Amz-Date, X-Joinplane-Join-Binding, and X-Amz-Security-Token and Content-Type "
                        "when sent; every one but Authorization signed",
                    }
                ),
                "body": p({**_string(), "description": "Action=GetCallerIdentity&Version=2011-06-15"}),
            },
            "Joinplane: the AWS IAM join method (docs/aws.md): a token named by its id, and an "
            "sts:GetCallerIdentity request the machine signed with its AWS credentials, bound to the "
            "csr's key; sent with a `Joinplane-Proof` header.",
        ),
        "joinplaneTpmActivation": _object(
            {
                "secret": p(
                    {
                        **_base64(64),
                        "description": "base64 of the secret the TPM recovered from the challenge",
                    }
                ),
            },
            "Joinplane: the retry of a TPM join, sent with a `Joinplane-Proof` header.",
        ),
        "joinplaneTpmChallenge": _object(
            {
                "credentialBlob": {**_base64(1024), "description": "base64 TPM2B_ID_OBJECT (size-prefixed)"},
                "encryptedSecret": {
                    **_base64(1024),
                    "description": "base64 TPM2B_ENCRYPTED_SECRET (size-prefixed)",
                },
                "expiresAt": {"type": "string", "description": "RFC 3339 UTC"},
            },
            "Joinplane: the credential a TPM join must activate (TPM2_ActivateCredential) before its retry.",
            required=["credentialBlob", "encryptedSecret", "expiresAt"],
        ),
        "controlplaneJoinMachineResponse": _object(
            {
                "ok": {"type": "boolean"},
                "errMsg": string,
                "workspaceId": string,
                "poolName": string,
                "machineId": string,
                "machineToken": {"type": "string", "description": "`jpm_...`, shown once"},
                "bootstrap": {
                    "anyOf": [
                        {"$ref": "#/components/schemas/controlplaneMachineBootstrapConfig"},
                        {"type": "null"},
                    ]
                },
                "certificate": {"type": "string", "description": "Joinplane: PEM client certificate"},
                "caCertificates": {"type": "string", "description": "Joinplane: PEM chain to the pool CA"},
                "certificateExpiresAt": {"type": "string", "description": "Joinplane: RFC 3339, or empty"},
                "schedulable": {"type": "boolean", "description": "Joinplane"},
                "joinRequest": {
                    "anyOf": [{"$ref": "#/components/schemas/joinplaneJoinRequestRef"}, {"type": "null"}],
                    "description": "Joinplane: the deferred join's request (202)",
                },
                "retryAfterSeconds": {"type": "integer", "description": "Joinplane: when to retry a 202"},
                "dryRun": {"type": "boolean", "description": "Joinplane: present (true) on a dry run"},
                "verdict": {"type": "string", "enum": ["admit", "defer", "deny"], "description": "dry run"},
                "reasons": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/AttestorReason"},
                    "description": "dry run: every attestor's vote",
                },
                "tpmChallenge": {
                    "$ref": "#/components/schemas/joinplaneTpmChallenge",
                    "description": "Joinplane: a TPM join's first answer (202): the credential to activate",
                },
            },
            "levers9's `controlplaneJoinMachineResponse`, every field emitted (EmitUnpopulated), "
            "plus Joinplane's additive fields.",
            required=[
                "ok",
                "errMsg",
                "workspaceId",
                "poolName",
                "machineId",
                "machineToken",
                "bootstrap",
                "certificate",
                "caCertificates",
                "certificateExpiresAt",
                "schedulable",
                "joinRequest",
                "retryAfterSeconds",
            ],
        ),
        "joinplaneJoinRequestRef": _object(
            {
                "requestId": {"type": "string", "pattern": join_requests.REQUEST_ID},
                "state": {"type": "string", "enum": ["pending"]},
                "expiresAt": {"type": "string", "pattern": views.TIMESTAMP},
                "poolId": {
                    "anyOf": [string, {"type": "null"}],
                    "description": "The pool whose operators decide it; null for a site token's request, "
                    "which any pool of the site may claim by approving it.",
                },
                "siteId": string,
            },
            required=["requestId", "state", "expiresAt", "poolId", "siteId"],
        ),
        "controlplaneMachineBootstrapConfig": _object(
            {
                "controlplaneHttpUrl": string,
                "controlplaneGrpcHost": string,
                "controlplaneGrpcPort": {"type": "integer", "format": "int32"},
                "controlplaneGrpcTls": {"type": "boolean"},
                "workspaceId": string,
                "poolName": string,
                "transport": string,
                "executor": string,
                "fallback": string,
                "disabledServices": {"type": "array", "items": string},
                "imageRegistryStore": string,
                "imageClipVersion": {"type": "string", "pattern": "^-?[0-9]+$", "format": "int64"},
                "imageLocalCacheEnabled": {"type": "boolean"},
                "telemetry": {
                    "anyOf": [
                        {"$ref": "#/components/schemas/controlplaneMachineTelemetryConfig"},
                        {"type": "null"},
                    ]
                },
                "billing": {
                    "anyOf": [
                        {"$ref": "#/components/schemas/controlplaneMachineBillingConfig"},
                        {"type": "null"},
                    ]
                },
                "workerImage": {"type": "string", "description": "Joinplane: the image this machine runs"},
            },
            required=[
                "controlplaneHttpUrl",
                "controlplaneGrpcHost",
                "controlplaneGrpcPort",
                "controlplaneGrpcTls",
                "workspaceId",
                "poolName",
                "transport",
                "executor",
                "fallback",
                "disabledServices",
                "imageRegistryStore",
                "imageClipVersion",
                "imageLocalCacheEnabled",
                "telemetry",
                "billing",
                "workerImage",
            ],
        ),
        "controlplaneMachineTelemetryConfig": _object(
            {
                "enabled": {"type": "boolean"},
                "streamPrefix": string,
                "logs": {"anyOf": [{"$ref": sink}, {"type": "null"}]},
                "events": {"anyOf": [{"$ref": sink}, {"type": "null"}]},
            },
            required=["enabled", "streamPrefix", "logs", "events"],
        ),
        "controlplaneMachineBillingConfig": _object(
            {
                "usageEndpoint": string,
                "usageToken": string,
                "costHookEndpoint": string,
                "costHookToken": string,
                "billableMarginPct": {"type": "number", "format": "double"},
            },
            required=[
                "usageEndpoint",
                "usageToken",
                "costHookEndpoint",
                "costHookToken",
                "billableMarginPct",
            ],
        ),
        "controlplaneMachineTelemetrySinkConfig": _object(
            {"destination": string, "credential": string, "streamPrefix": string},
            required=["destination", "credential", "streamPrefix"],
        ),
        "joinplaneRenewRequest": _object(
            {
                "machineToken": p({**_string(), "description": "The machine's token (`jpm_...`)"}),
                "csr": {
                    **_string(join_wire.MAX_PEM),
                    "minLength": 1,
                    "description": "PEM PKCS#10; the key may change",
                },
            },
            "Joinplane: renew a machine's certificate.",
            required=["csr"],
        ),
        "joinplaneRenewResponse": _object(
            {
                "machineId": {"type": "string", "pattern": machines.MACHINE_ID},
                "certificate": string,
                "caCertificates": string,
                "certificateExpiresAt": {"type": "string", "pattern": views.TIMESTAMP},
            },
            required=["machineId", "certificate", "caCertificates", "certificateExpiresAt"],
        ),
        "rpcStatus": _object(
            {
                "code": {
                    "type": "integer",
                    "format": "int32",
                    "enum": sorted({c for c, _ in join_wire.GRPC.values()}),
                },
                "message": string,
                "details": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/protobufAny"},
                    "description": "A `google.rpc.ErrorInfo` (`reason`, `domain: joinplane`, `metadata`) "
                    'naming the refusal (docs/join.md, "Refusal reasons"); a `google.rpc.RetryInfo` too '
                    "on a 503 that says when to retry.",
                },
            },
            "grpc-gateway's error body; the HTTP status is grpc-gateway's mapping of `code`.",
            required=["code", "message", "details"],
        ),
        "protobufAny": {"type": "object", "properties": {"@type": string}, "additionalProperties": {}},
    }


_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)"

PROOF_HEADER: Schema = {
    "name": "Joinplane-Proof",
    "in": "header",
    "required": False,
    "description": "Fresh proof of possession of the machine's key, needed whenever credentials "
    "for an identity that already exists are handed out (a re-join, consuming an approval, a "
    "renewal): `t=<unix ms>,sig=<base64>[,key=<base64 DER SPKI>][,csrsig=<base64>]`, signatures "
    "over `joinplane-proof-v1\\n<join|renew>\\n<t>\\n<sha256 hex of the token>\\n<sha256 hex of "
    f"the body>\\n` made within {proof.WINDOW_MS // 1000} s, each accepted once (newer than every "
    "proof accepted for the key before). See docs/join.md.",
    "schema": {
        "type": "string",
        "maxLength": proof.MAX_HEADER_CHARS,
        "pattern": rf"^t=[0-9]{{13}},sig={_BASE64}(?:,key={_BASE64})?(?:,csrsig={_BASE64})?$",
    },
    "example": "t=1795003200123,sig=MEUCIQDx",
}


def _grpc_errors() -> Schema:
    status = "#/components/schemas/rpcStatus"
    descriptions = {
        "400": "3 INVALID_ARGUMENT (malformed request, bad CSR, malformed proof), 9 FAILED_PRECONDITION",
        "401": "16 UNAUTHENTICATED: unknown, expired, used-up or revoked token; missing or stale proof",
        "403": "7 PERMISSION_DENIED: denied by an attestor, rejected request, revoked machine",
        "409": "10 ABORTED: a concurrent join for this machine won; retry",
        "413": f"8: a body over {join_wire.MAX_BODY_BYTES} bytes",
        "429": "8 RESOURCE_EXHAUSTED",
        "500": "13 INTERNAL",
        "503": "14 UNAVAILABLE: retry",
    }
    errors: Schema = {
        code: {"description": text, "content": _content(status)} for code, text in descriptions.items()
    }
    errors["default"] = {"description": "An unexpected error response.", "content": _content(status)}
    return errors


def _machine_operations() -> dict[str, Schema]:
    """levers9 JoinMachine's two operations by operationId (the route table gives their paths)."""
    response = "#/components/schemas/controlplaneJoinMachineResponse"
    join_example = {
        "joinToken": "jpt_01m8nz6smg0chzvz0b58z6hma5_nd96v84g4q2p5cd1pr2rhpe0g1qwgdet",
        "hostname": "gpu-01",
        "os": "linux",
        "arch": "amd64",
        "cpuCount": 64,
        "memoryMb": "524288",
        "gpuCount": 8,
        "csr": "-----BEGIN CERTIFICATE REQUEST-----\n...\n-----END CERTIFICATE REQUEST-----\n",
    }
    return {
        "ControlPlaneService_JoinMachine": {
            "post": {
                "tags": [TAGS["join"][0]],
                "summary": "Join machine",
                "description": "levers9's JoinMachine. 200: admitted (`ok: true`, identity and "
                "bootstrap). 202: deferred to an operator (`joinRequest`); retry with the same key "
                "after `retryAfterSeconds`. A join that hands out credentials for an identity that "
                "already exists needs `Joinplane-Proof`. See docs/join.md.",
                "parameters": [PROOF_HEADER],
                "requestBody": {
                    "required": True,
                    "content": {
                        JSON: {
                            "schema": {"$ref": "#/components/schemas/controlplaneJoinMachineRequest"},
                            "example": join_example,
                        }
                    },
                },
                "responses": {
                    "200": {"description": "A successful response.", "content": _content(response)},
                    "202": {
                        "description": "Joinplane: deferred; an operator must decide.",
                        "content": _content(response),
                    },
                    **_grpc_errors(),
                },
            }
        },
        "Joinplane_RenewMachine": {
            "post": {
                "tags": [TAGS["join"][0]],
                "summary": "Renew a machine's certificate",
                "description": "Joinplane's extension of levers9's JoinMachine: a new certificate for "
                "the machine token's machine; the key may change (sign the proof with the old key and "
                "send it as `key=`). Needs `Joinplane-Proof`.",
                "parameters": [PROOF_HEADER],
                "requestBody": {
                    "required": True,
                    "content": {
                        JSON: {
                            "schema": {"$ref": "#/components/schemas/joinplaneRenewRequest"},
                            "example": {
                                "machineToken": EXAMPLE_MACHINE_TOKEN,
                                "csr": join_example["csr"],
                            },
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The new certificate.",
                        "content": _content("#/components/schemas/joinplaneRenewResponse"),
                    },
                    **_grpc_errors(),
                },
            }
        },
    }


def _crl_operation() -> Schema:
    """GET /crl/{caId}: a CA's CRL, DER, for verifiers (no credentials)."""
    return {
        "get": {
            "tags": [TAGS["certificateAuthorities"][0]],
            "summary": "A certificate authority's revocation list",
            "description": "The CRL (RFC 5280, DER) of CA `caId`, signed by that CA's KMS key: the "
            "serials of its unexpired certificates of revoked machines, and of certificates a "
            "key-rotating renewal replaced (reason `superseded`). Every machine certificate's CRL "
            "distribution point names this URL. nextUpdate is 3 days out; rebuilt after a day or "
            "when a machine is revoked. No credentials: a CRL is public and signed. See docs/pki.md.",
            "parameters": [
                {
                    "name": "caId",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": f"^ca_{_ecma(ids.ULID_PATTERN)}$"},
                    "example": "ca_01m8nz6smg0chzvz0b58z6hma5",
                }
            ],
            "responses": {
                "200": {
                    "description": "The CRL. `Cache-Control: public, max-age=<at most 300>`.",
                    "headers": {
                        "Cache-Control": {"schema": {"type": "string"}, "description": "public, max-age=N"}
                    },
                    "content": {
                        "application/pkix-crl": {
                            "schema": {"type": "string", "contentMediaType": "application/pkix-crl"}
                        }
                    },
                },
                "404": {
                    "description": "NOT_FOUND: no CA by that id (or one that has not signed yet)",
                    "content": _content("#/components/schemas/Error"),
                },
                "500": {
                    "description": "INTERNAL",
                    "content": _one_of_content(
                        "#/components/schemas/Error", "#/components/schemas/GatewayMessage"
                    ),
                },
                "503": {
                    "description": "UNAVAILABLE: the key store or table is unavailable; retry",
                    "headers": RETRY_AFTER,
                    "content": _one_of_content(
                        "#/components/schemas/Error", "#/components/schemas/GatewayMessage"
                    ),
                },
            },
        }
    }


def _bundle_operation() -> Schema:
    """GET /bundle/{caId}: a pool's bundle, PEM, for verifiers (no credentials)."""
    operation = _crl_operation()
    get = operation["get"]
    get["summary"] = "A pool's trust bundle"
    get["description"] = (
        "The PEM certificates a verifier of the pool's machines should trust: the active CA, the "
        "prepared one (a rotation in progress), then every retired CA whose certificates may still be "
        "valid, each followed by its chain. `caId` is any CA the pool has had "
        "(certificateAuthorities/get's `bundleUrl` names its first): the URL stays the same across "
        "rotations. Fetch it at least once per propagation period (the pool's caPropagationSeconds) "
        "and every machine certificate verifies. No credentials: it holds public certificates only. "
        "See docs/pki.md."
    )
    ok = get["responses"]["200"]
    ok["description"] = "The bundle. `Cache-Control: public, max-age=300`."
    ok["content"] = {
        "application/pem-certificate-chain": {
            "schema": {"type": "string", "contentMediaType": "application/pem-certificate-chain"}
        }
    }
    get["responses"]["404"]["description"] = "NOT_FOUND: no CA by that id (or a certificate request's)"
    return operation


# --- Sylve's accept-join: /cluster/accept-join -------------------------------------------------


def _sylve_schemas() -> dict[str, Schema]:
    n = _nullable  # Go's encoding/json: null leaves the field as it was
    trimmed = f"Required: non-empty, and at most {sylve_wire.MAX_ID_BYTES} bytes of UTF-8, once trimmed."
    uint64 = {"type": "integer", "minimum": 0, "maximum": 2**64 - 1, "description": "a whole literal"}
    entry = {
        "type": "object",
        "properties": {
            "nodeId": n({"type": "string"}),
            "guestType": n({"type": "string"}),
            "guestId": n(uint64),
            "recordId": n(uint64),
            "name": n({"type": "string"}),
        },
    }
    entries = n({"type": "array", "items": {"$ref": "#/components/schemas/SylveInventoryEntry"}})
    return {
        "SylveInventoryEntry": entry,
        "SylveInventoryConflict": {
            "type": "object",
            "properties": {"guestId": n(uint64), "reason": n({"type": "string"}), "entries": entries},
        },
        "SylveInventoryReport": {
            "type": "object",
            "properties": {
                "entries": entries,
                "conflicts": n(
                    {"type": "array", "items": {"$ref": "#/components/schemas/SylveInventoryConflict"}}
                ),
                "digest": n({"type": "string"}),
            },
        },
        "SylveAcceptJoinRequest": {
            "type": "object",
            "description": "Sylve's `InternalHandlersClusterAcceptJoinRequest`, read as Go's "
            "encoding/json reads it: names match case-insensitively, unknown fields are ignored, "
            "`null` leaves a field unset.",
            "required": ["nodeId", "nodeIp", "nodeVersion"],
            "properties": {
                "nodeId": {"type": "string", "minLength": 1, "description": trimmed},
                "nodeIp": {"type": "string", "format": "ipv4", "description": "IPv4 (or IPv4-mapped IPv6)"},
                "nodeVersion": {"type": "string", "minLength": 1, "description": trimmed},
                "preflight": n({"type": "boolean"}),
                "inventory": n({"$ref": "#/components/schemas/SylveInventoryReport"}),
            },
        },
        "SylveResponse": {
            "type": "object",
            "description": "Sylve's `internal.APIResponse`: `message` is the outcome a node switches on "
            "(`node_added_to_cluster`, `cluster_join_preflight_passed`, `invalid_cluster_key`, ...), "
            "`error` the detail.",
            "required": ["status", "message", "error", "data"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "enum": ["success", "error"]},
                "message": {"type": "string"},
                "error": {"type": "string"},
                "data": {
                    "description": "On success the (merged, for a preflight) inventory report; else null"
                },
            },
        },
    }


def _cluster_operation(route: Route) -> Schema:
    envelope = _content("#/components/schemas/SylveResponse")
    alias = route.path.startswith("/api/")
    answers = {
        "200": "`node_added_to_cluster` (the submitted inventory echoed) or `cluster_join_preflight_passed`",
        "400": "`invalid_request_payload`, `cluster_join_failed`",
        "401": "`invalid_cluster_key`: no, empty or several `X-Cluster-Key`, or an unknown one",
        "403": "`cluster_token_forbidden`: `X-Cluster-Token` or `Authorization` was sent",
        "409": "`cluster_version_mismatch`, `guest_identity_join_preflight_failed`",
        "413": f"`request_body_too_large`: a body over {sylve_wire.MAX_BODY_BYTES} bytes",
        "500": "`internal_error`",
        "503": "`guest_identity_inventory_unavailable`: retry (`Retry-After` when out of time)",
    }
    responses: Schema = {code: {"description": text, "content": envelope} for code, text in answers.items()}
    responses["503"]["headers"] = RETRY_AFTER
    return {
        "post": {
            "tags": [TAGS["cluster"][0]],
            "summary": "Accept Join" + (" (Sylve's /api path)" if alias else ""),
            "description": "Sylve's accept-join: accept a join request from a cluster node, "
            "authenticated by the pool's cluster key. The order is the contract: credential "
            "(403/401), size (413), body (400), then the leader's checks (409)."
            + (" The same endpoint at the path a Sylve node posts to." if alias else ""),
            "requestBody": {
                "required": True,
                "content": {
                    JSON: {
                        "schema": {"$ref": "#/components/schemas/SylveAcceptJoinRequest"},
                        "example": {
                            "nodeId": "node-b",
                            "nodeIp": "10.0.0.12",
                            "nodeVersion": "0.9.1",
                            "preflight": True,
                            "inventory": {"entries": [], "conflicts": [], "digest": ""},
                        },
                    }
                },
            },
            "responses": responses,
        }
    }


# --- the document ------------------------------------------------------------------------------


def routes() -> list[str]:
    """Every path this document describes: the route table's."""
    return sorted(route.path for route in API)


def _resolve(dotted: str) -> Any:
    """`module:attribute` from the route table."""
    module, _, attribute = dotted.partition(":")
    return getattr(importlib.import_module(module), attribute)


# How each of the table's authentications is declared (securitySchemes below). A join token may
# also travel in the body, so /machines/join's bearer is optional.
SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "api-key": [{"apiKey": []}],
    "join-token": [{}, {"joinToken": []}],
    "cluster-key": [{"clusterKey": []}],
    "none": [],
}


def _strip_key(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return {k: _strip_key(v, key) for k, v in node.items() if k != key}
    if isinstance(node, list):
        return [_strip_key(v, key) for v in node]
    return node


def _strip_titles(node: Any) -> Any:
    """pydantic's auto-generated `title`s repeat the property names; they add nothing."""
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


@dataclass
class _Components:
    schemas: dict[str, Schema] = field(default_factory=dict)

    def add_request(self, model: type[BaseModel]) -> str:
        return self._add(model.__name__, model.model_json_schema(ref_template=REF))

    def add_view(self, view: Any) -> str:
        """A TypedDict of joinplane.views."""
        return self._add(view.__name__, TypeAdapter(view).json_schema(ref_template=REF))

    def _add(self, name: str, schema: Schema) -> str:
        for inner, definition in schema.pop("$defs", {}).items():
            self._put(inner, definition)
        self._put(name, schema)
        return REF.format(model=name)

    def _put(self, name: str, schema: Schema) -> None:
        schema = _strip_titles(schema)
        if name in REQUEST_PATCHES and "properties" in schema:
            schema = copy.deepcopy(schema)
            REQUEST_PATCHES[name](schema)
        if name in self.schemas and self.schemas[name] != schema:
            raise ValueError(f"two different schemas are both called {name}")
        self.schemas[name] = schema


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


def _operator_operation(route: Route, components: _Components) -> Schema:
    assert route.request is not None and route.response is not None, route
    doc = DOCS[route.operation]
    request_model = _resolve(route.request)
    request_ref = components.add_request(request_model)
    response_ref = components.add_view(_resolve(route.response))
    # A missing body reads as `{}` (operator_api.validate): only a model with a required field
    # makes the body itself required.
    body_required = bool(request_model.model_json_schema().get("required"))
    return {
        "post": {
            "tags": [TAGS[route.path.split("/")[3]][0]],
            "summary": doc.summary,
            "description": doc.description,
            "requestBody": {
                "required": body_required,
                "content": {JSON: {"schema": {"$ref": request_ref}, "example": doc.example}},
            },
            "responses": {
                "200": {"description": "OK", "content": _content(response_ref)},
                **_operator_errors(),
            },
        }
    }


def document() -> dict[str, Any]:
    components = _Components()
    components.schemas["Error"] = ERROR
    components.schemas["GatewayMessage"] = GATEWAY_MESSAGE
    machine_operations = _machine_operations()
    paths: dict[str, Any] = {}
    for route in API:
        if route.auth == "api-key":
            operation = _operator_operation(route, components)
        elif route.function == "MachineJoinFunction":
            operation = machine_operations[route.operation]
        elif route.function == "ClusterJoinFunction":
            operation = _cluster_operation(route)
        elif route.operation == "certificateAuthorities.crl":
            operation = _crl_operation()
        elif route.operation == "certificateAuthorities.bundle":
            operation = _bundle_operation()
        else:
            raise ValueError(f"no dialect documents {route}")
        method = route.method.lower()
        responses = operation[method]["responses"]
        gateway = "#/components/schemas/GatewayMessage"
        if "429" in responses:  # the dialect's own RESOURCE_EXHAUSTED, or the gateway's throttle
            own = responses["429"]
            responses["429"] = {
                "description": f"{own['description']}; or {_throttled(route.path)}",
                "content": _one_of_content(own["content"][JSON]["schema"]["$ref"], gateway),
            }
        else:
            responses["429"] = {"description": _throttled(route.path), "content": _content(gateway)}
        operation[method]["responses"] = dict(sorted(responses.items()))
        paths[route.path] = {method: _with_table_fields(operation[method], route)}
    unused = set(DOCS) - {route.operation for route in API}
    if unused:
        raise ValueError(f"documentation for operations the route table lacks: {sorted(unused)}")
    # AttestorReason is shared by join requests and dry-run join answers.
    components.add_view(views.AttestorReason)
    for name, schema in {**_join_schemas(), **_sylve_schemas()}.items():
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


if __name__ == "__main__":
    print(render(), end="")
