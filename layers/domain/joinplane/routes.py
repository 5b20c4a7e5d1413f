"""Every HTTP route, once: the table the handlers bind to, template.yaml's HttpApi events are
checked against (tests/api/test_route_table.py), the OpenAPI document is generated from
(joinplane.contract) and the tests find a route's function by. Each row carries what the document
says of it: a summary, a description and an example request.

Plain data, stdlib only: every HTTP function imports it at cold start (through `joinplane.http`).
The request model and response view are dotted names, `module:attribute`, that only the OpenAPI
generator resolves, so a function never imports pydantic models or views it does not use.

`operation` is the route's OpenAPI operationId, unique across the API; a handler binds to it
(`@routes.operation("pools.create")`). The contracts we speak (levers9's JoinMachine, the
joinRequests API, Sylve's accept-join) keep their own operationIds.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

# How a request proves who sent it. `api-key`: the operator API's `Authorization: Bearer jpk_...`,
# through the template's ApiKeyAuthorizer. `join-token`: a join token, in the body or as a bearer.
# `cluster-key`: a pool's `X-Cluster-Key`. `none`: nothing API Gateway or a header checks (a
# renewal's machine token travels in the body, with its proof).
Auth = Literal["api-key", "join-token", "cluster-key", "none"]


class Route(NamedTuple):
    method: str
    path: str
    function: str  # the AWS::Serverless::Function's logical id in template.yaml
    operation: str
    auth: Auth
    request: str | None = None  # `module:Model`, or None where the contract's schema is hand-written
    response: str | None = None  # `module:View` (a TypedDict in joinplane.views), likewise
    # The OpenAPI document's words for it: every route of `API` has them (the generator refuses
    # one without). The example is a request body, or a GET's path parameters.
    summary: str = ""
    description: str = ""
    example: dict[str, Any] | None = None


def _operator(
    function: str,
    path: str,
    request: str,
    response: str,
    summary: str,
    description: str,
    example: dict[str, Any],
) -> Route:
    """An operator route: POST under /api/compute, behind the API key authorizer; its operationId
    is its path after /api/compute with dots (`pools.create`, `clusters.nodes.list`)."""
    operation = path.removeprefix("/api/compute/").replace("/", ".")
    view = f"joinplane.views:{response}"
    return Route("POST", path, function, operation, "api-key", request, view, summary, description, example)


# Ids the examples share, each of its kind's shape.
EXAMPLE_TOKEN_ID = "jtok_01m8nz6smg0chzvz0b58z6hma5"
EXAMPLE_REQUEST_ID = "jreq_01m8nz6t2rrm70af48hhs5f7zx"
EXAMPLE_MACHINE_ID = "mach_01m8nz6v0d5q3h2k9w7x4c1b8e"
EXAMPLE_MACHINE_TOKEN = "jpm_01m8nz6v0d5q3h2k9w7x4c1b8e_5ycq0x3m8k2h7p1d9w4r6t0v2b8n3s5f"
EXAMPLE_EK = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
EXAMPLE_CSR = "-----BEGIN CERTIFICATE REQUEST-----\n...\n-----END CERTIFICATE REQUEST-----\n"
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
# What a Sylve node sends its leader (either path).
EXAMPLE_ACCEPT_JOIN = {
    "nodeId": "node-b",
    "nodeIp": "10.0.0.12",
    "nodeVersion": "0.9.1",
    "preflight": True,
    "inventory": {"entries": [], "conflicts": [], "digest": ""},
}

# fmt: off
# One row per route: where it goes (method, path, function, ...), then what the OpenAPI document
# says of it (summary, description, example). Kept a table, one route to a block.
ROUTES: tuple[Route, ...] = (
    _operator(
        "ApiKeysFunction", "/api/compute/apiKeys/create", "joinplane.apikeys:CreateApiKey", "ApiKeyCreated",
        "Create an API key",
        "The secret `key` is returned once; only its SHA-256 is stored. A key may hand out only "
        "grants it holds itself (`PERMISSION_DENIED` otherwise).",
        {"tenantId": "dev", "grants": ["compute:join-tokens:*@compute-pool/dev-pool"], "description": "ci"},
    ),
    _operator(
        "ApiKeysFunction", "/api/compute/apiKeys/list", "joinplane.apikeys:ListApiKeys", "ApiKeyList",
        "List API keys",
        "A tenant's API keys, never their secrets, in keyId order.",
        {"tenantId": "dev", "limit": 50},
    ),
    _operator(
        "ApiKeysFunction", "/api/compute/apiKeys/revoke", "joinplane.apikeys:RevokeApiKey", "ApiKey",
        "Revoke an API key",
        "Revoking again changes nothing. A key may revoke only keys whose every grant it holds.",
        {"tenantId": "dev", "keyId": "key_01m8p0000000000000000000ab"},
    ),
    _operator(
        "ApiKeysFunction", "/api/compute/apiKeys/whoami", "joinplane.apikeys:WhoAmI", "ApiKey",
        "Tell the calling key about itself",
        "The API key in the `Authorization` header: its id, tenant, grants, description and state, "
        "never its secret. Any valid key may ask; no grant is needed. The body is `{}`. A key "
        "revoked moments ago is `UNAUTHENTICATED` here even while the gateway still caches it.",
        {},
    ),
    _operator(
        "PoolsFunction", "/api/compute/pools/create", "joinplane.pools:CreatePool", "Pool",
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
    _operator(
        "PoolsFunction", "/api/compute/pools/get", "joinplane.pools:PoolRef", "Pool",
        "Get a pool",
        "One pool.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    _operator(
        "PoolsFunction", "/api/compute/pools/list", "joinplane.pools:ListPools", "PoolList",
        "List pools",
        "The pools the key can read, in poolId order; `nextCursor` continues.",
        {"tenantId": "dev", "state": "active"},
    ),
    _operator(
        "PoolsFunction", "/api/compute/pools/update", "joinplane.pools:UpdatePool", "Pool",
        "Update a pool",
        "The fields given replace the stored value whole; absent fields are left alone. Only "
        "`cluster` can be removed (null); an archived pool is `INVALID_STATE`.",
        {"tenantId": "dev", "poolId": "dev-pool", "bootstrap": {"workerImage": "worker:1.5"}},
    ),
    _operator(
        "PoolsFunction", "/api/compute/pools/archive", "joinplane.pools:PoolRef", "Pool",
        "Archive a pool",
        "An archived pool refuses new joins and changes; archiving again changes nothing.",
        {"tenantId": "dev", "poolId": "old-pool"},
    ),
    _operator(
        "PoolsFunction", "/api/compute/pools/simulatePolicy", "joinplane.policy_simulation:SimulatePolicy",
        "PolicySimulation",
        "Simulate a draft join policy",
        "Runs `joinPolicy` (rules as `pools/update` takes them, not saved) over the pool's most recent "
        "joins, up to `limit` join requests and `limit` admitted machines, newest first, and says for "
        "each what the join would decide under the draft, by which rule, and whether that differs "
        "from what happened, with counts. Changes nothing and publishes no event. Needs "
        "`compute:pools:read`, `compute:join-tokens:read` and `compute:machines:read` on the pool; "
        "an invalid rule is `INVALID_ARGUMENT` with its position, as in `pools/update`.",
        {
            "tenantId": "dev",
            "poolId": "dev-pool",
            "joinPolicy": [
                {
                    "name": "gpu-rack",
                    "when": 'request.hostname.startsWith("gpu-")',
                    "decision": "approve",
                    "reason": "the new GPU rack",
                }
            ],
        },
    ),
    _operator(
        "JoinTokensFunction", "/api/compute/joinTokens/create", "joinplane.tokens:CreateJoinToken",
        "JoinTokenCreated",
        "Create a join token",
        "For exactly one of `poolId` (a pool token) or `siteId` (a site token: every join is "
        "deferred until a pool claims it). The secret `token` is returned once.",
        {"tenantId": "dev", "poolId": "dev-pool", "ttlSeconds": 3600, "maxUses": 5, "requireApproval": True},
    ),
    _operator(
        "JoinTokensFunction", "/api/compute/joinTokens/list", "joinplane.tokens:ListJoinTokens",
        "JoinTokenList",
        "List join tokens",
        "A pool's (`poolId`) or a site's (`siteId`) join tokens, never their secrets.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    _operator(
        "JoinTokensFunction", "/api/compute/joinTokens/revoke", "joinplane.tokens:RevokeJoinToken",
        "JoinToken",
        "Revoke a join token",
        "Revoking again changes nothing.",
        {"tenantId": "dev", "tokenId": EXAMPLE_TOKEN_ID},
    ),
    _operator(
        "JoinRequestsFunction", "/api/compute/joinRequests/list", "joinplane.join_requests:ListJoinRequests",
        "JoinRequestList",
        "List join requests",
        "With `poolId`: the requests that pool can decide, its own and its site's that no pool has "
        "claimed. Without: the queue across pools, every request of every pool of the tenant the key "
        "may read (`compute:join-tokens:read`) and the unclaimed requests of those pools' sites, each "
        "once; each item names its `poolId` (null while unclaimed) and `siteId`. Oldest first "
        "(by requestId); a pending or approved request past its expiry reads as `expired`.",
        {"tenantId": "dev", "state": "pending", "limit": 50},
    ),
    _operator(
        "JoinRequestsFunction", "/api/compute/joinRequests/get", "joinplane.join_requests:GetJoinRequest",
        "JoinRequest",
        "Get a join request",
        "One request by its id. Without `poolId` it is read through its own pool, or, while no pool "
        "has claimed it, through an active pool of its site the key may read; `NOT_FOUND` when the "
        "key sees neither.",
        {"tenantId": "dev", "requestId": EXAMPLE_REQUEST_ID},
    ),
    _operator(
        "JoinRequestsFunction", "/api/compute/joinRequests/approve",
        "joinplane.join_requests:ApproveJoinRequest", "JoinRequest",
        "Approve a join request",
        "Assigns it to the pool with a new expiry of `ttlSeconds`; the machine's retry with the "
        "same key consumes it. Approving again for this pool returns the approval unchanged. "
        "In a pool whose `approvalsRequired` is more than 1, each distinct key's approval is "
        "recorded in `approvals` and the request stays `pending` until the last one approves it; "
        "the same key again changes nothing. "
        "`poolId` may be left out for a request a pool has already claimed (it is decided against "
        "that pool); a site's unclaimed request needs it, since approving claims it for that pool "
        "(`INVALID_ARGUMENT` on `poolId` otherwise, its detail listing the pools the key may choose).",
        {"tenantId": "dev", "poolId": "dev-pool", "requestId": EXAMPLE_REQUEST_ID, "reason": "rack 7"},
    ),
    _operator(
        "JoinRequestsFunction", "/api/compute/joinRequests/reject",
        "joinplane.join_requests:DecideJoinRequest", "JoinRequest",
        "Reject a join request",
        "Rejects a pending request or withdraws an unused approval; rejecting again changes nothing. "
        "Without `poolId` the request is decided against its own pool, or, unclaimed, against any "
        "active pool of its site on which the key holds `compute:join-tokens:create`; it stays "
        "unclaimed.",
        {"tenantId": "dev", "requestId": EXAMPLE_REQUEST_ID, "reason": "unknown box"},
    ),
    _operator(
        "MachinesFunction", "/api/compute/machines/list", "joinplane.machines:ListMachines", "MachineList",
        "List machines",
        "A pool's machines in machineId order.",
        {"tenantId": "dev", "poolId": "dev-pool", "state": "active"},
    ),
    _operator(
        "MachinesFunction", "/api/compute/machines/get", "joinplane.machines:MachineRef", "Machine",
        "Get a machine",
        "One machine.",
        {"tenantId": "dev", "machineId": EXAMPLE_MACHINE_ID},
    ),
    _operator(
        "MachinesFunction", "/api/compute/machines/revoke", "joinplane.machines:RevokeMachine", "Machine",
        "Revoke a machine",
        "Bans it: its machine token and re-joins stop working, its hardware ids are released, and "
        "its key cannot join again.",
        {"tenantId": "dev", "machineId": EXAMPLE_MACHINE_ID, "reason": "decommissioned"},
    ),
    _operator(
        "DiscoveryFunction", "/api/compute/discovery/register", "joinplane.discovery:RegisterEntry",
        "DiscoveryEntry",
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
    _operator(
        "DiscoveryFunction", "/api/compute/discovery/list", "joinplane.discovery:ListEntries",
        "DiscoveryList",
        "List a site's discovery inventory",
        "Entries oldest first.",
        {"tenantId": "dev", "siteId": "dev-site"},
    ),
    _operator(
        "DiscoveryFunction", "/api/compute/discovery/remove", "joinplane.discovery:RemoveEntry",
        "DiscoveryEntry",
        "Remove a discovery entry",
        "Returns the entry removed.",
        {"tenantId": "dev", "siteId": "dev-site", "entryId": "disc_01m8nz6w3a9c8d7e6f5g4h3j2k"},
    ),
    _operator(
        "TpmAllowListFunction", "/api/compute/tpmAllowList/add", "joinplane.tpm_allow:AddKey", "AllowedKey",
        "Allow a TPM endorsement key",
        "Exactly one of `ekPublicKeySha256` (hex SHA-256 of the EK's SubjectPublicKeyInfo) or "
        "`ekCertificatePem` (the EK certificate; the hash is taken from it).",
        {"tenantId": "dev", "siteId": "dev-site", "ekPublicKeySha256": EXAMPLE_EK},
    ),
    _operator(
        "TpmAllowListFunction", "/api/compute/tpmAllowList/list", "joinplane.tpm_allow:ListKeys",
        "AllowedKeyList",
        "List a site's allowed endorsement keys",
        "In hash order.",
        {"tenantId": "dev", "siteId": "dev-site"},
    ),
    _operator(
        "TpmAllowListFunction", "/api/compute/tpmAllowList/remove", "joinplane.tpm_allow:RemoveKey",
        "AllowedKey",
        "Remove an allowed endorsement key",
        "Returns the entry removed.",
        {"tenantId": "dev", "siteId": "dev-site", "ekPublicKeySha256": EXAMPLE_EK},
    ),
    _operator(
        "TpmAllowListFunction", "/api/compute/tpmAllowList/manufacturers/add",
        "joinplane.tpm_manufacturers:AddManufacturer", "TpmManufacturer",
        "List a TPM manufacturer's CA certificate",
        "A root (self-signed) or an intermediate that completes a chain to one. Tokens with "
        "`attestation.tpmTrust: manufacturer` admit activated EKs whose certificate chains to a listed "
        "root (docs/tpm.md).",
        {"tenantId": "dev", "siteId": "dev-site", "certificatePem": EXAMPLE_TPM_ROOT},
    ),
    _operator(
        "TpmAllowListFunction", "/api/compute/tpmAllowList/manufacturers/list",
        "joinplane.tpm_manufacturers:ListManufacturers", "TpmManufacturerList",
        "List a site's TPM manufacturer certificates",
        "In the order of their certificates' SHA-256.",
        {"tenantId": "dev", "siteId": "dev-site"},
    ),
    _operator(
        "TpmAllowListFunction", "/api/compute/tpmAllowList/manufacturers/remove",
        "joinplane.tpm_manufacturers:RemoveManufacturer", "TpmManufacturer",
        "Remove a TPM manufacturer certificate",
        "Returns the certificate removed.",
        {"tenantId": "dev", "siteId": "dev-site", "certificateSha256": EXAMPLE_EK},
    ),
    _operator(
        "AuditEventsFunction", "/api/compute/auditEvents/list", "joinplane.audit:ListAuditEvents",
        "AuditEventList",
        "List security events",
        "Newest first. With `poolId`, the pool's events (a pool-scoped key suffices); without, the tenant's.",
        {"tenantId": "dev", "poolId": "dev-pool", "detailType": "security.machine.joined"},
    ),
    _operator(
        "ClustersFunction", "/api/compute/clusters/rotateKey",
        "joinplane.clusters.membership:RotateClusterKey", "ClusterKeyRotated",
        "Make the pool a cluster, or rotate its key",
        "Issues a new cluster key (`jck_...`, returned once); the previous one stops working.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    _operator(
        "ClustersFunction", "/api/compute/clusters/nodes/list",
        "joinplane.clusters.membership:ListClusterNodes", "ClusterNodeList",
        "List a cluster's member nodes",
        "In nodeId order.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    _operator(
        "ClustersFunction", "/api/compute/clusters/guests/list",
        "joinplane.clusters.membership:ListClusterGuests", "ClusterGuestList",
        "List a cluster's guest-ID registry",
        "Claims in guestId order, optionally of one node.",
        {"tenantId": "dev", "poolId": "dev-pool", "nodeId": "node-a"},
    ),
    _operator(
        "CertificateAuthoritiesFunction", "/api/compute/certificateAuthorities/get",
        "joinplane.authorities:CertificateAuthorityRef", "CertificateAuthorities",
        "Read a pool's certificate authorities",
        "The rotation's phases: the active CA, the prepared `next` one (with when it signs), the "
        "retired ones (with when they leave the bundle), the bundle machines and verifiers should "
        "trust (active first, then the prepared CA, then retired CAs whose certificates may still be "
        "valid) and its public `bundleUrl`. Makes the pool's first CA (a KMS key) if it has none yet, "
        "as its first join would. Needs `compute:pools:read`.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    _operator(
        "CertificateAuthoritiesFunction", "/api/compute/certificateAuthorities/rotate",
        "joinplane.authorities:Rotate", "CertificateAuthorities",
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
    _operator(
        "CertificateAuthoritiesFunction", "/api/compute/certificateAuthorities/activate",
        "joinplane.authorities:Activate", "CertificateAuthorities",
        "Make the prepared CA sign now",
        "The pool's prepared CA (from rotate or importCertificate) signs from now on, before its "
        "propagation period has ended; the active CA is retired. `caId`, when given, must be the "
        "prepared CA. Verifiers that have not fetched the bundle since the rotation reject the new "
        "CA's certificates. FAILED_PRECONDITION (NO_PREPARED_CA) when none is prepared. Needs "
        "`compute:pools:write`.",
        {"tenantId": "dev", "poolId": "dev-pool", "caId": "ca_01m8nz6smg0chzvz0b58z6hma5"},
    ),
    _operator(
        "CertificateAuthoritiesFunction", "/api/compute/certificateAuthorities/createCsr",
        "joinplane.authorities:CertificateAuthorityRef", "CertificateAuthorityRequest",
        "Ask for a pool CA signed by your own root",
        "Makes a new KMS key for the pool and returns a PKCS#10 request for it: have your CA sign it as "
        "an intermediate (CA:TRUE, pathlen:0, keyCertSign and cRLSign, a subjectKeyIdentifier) and import "
        "the result with importCertificate. The pool keeps issuing from its active CA meanwhile; a newer "
        "request replaces a pending one (its key is scheduled for deletion). Needs `compute:pools:write`.",
        {"tenantId": "dev", "poolId": "dev-pool"},
    ),
    _operator(
        "CertificateAuthoritiesFunction", "/api/compute/certificateAuthorities/importCertificate",
        "joinplane.authorities:ImportCertificate", "CertificateAuthorities",
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
    # A CA's certificate revocation list (DER), named by its certificates' CRL distribution point:
    # verifiers fetch it without credentials. Its answer is hand-written (joinplane.contract.pki).
    Route(
        "GET", "/crl/{caId}", "CertificateAuthoritiesFunction", "certificateAuthorities.crl", "none",
        summary="A certificate authority's revocation list",
        description="The CRL (RFC 5280, DER) of CA `caId`, signed by that CA's KMS key: the serials of "
        "its unexpired certificates of revoked machines, and of certificates a key-rotating renewal "
        "replaced (reason `superseded`). Every machine certificate's CRL distribution point names this "
        "URL. nextUpdate is 3 days out; rebuilt after a day or when a machine is revoked. With the "
        "`intermediate` signing mode, `int_...` names a per-container intermediate: its CRL, signed "
        "once when it was made and empty, until it expires. No credentials: a CRL is public and "
        "signed. See docs/pki.md.",
        example={"caId": "ca_01m8nz6smg0chzvz0b58z6hma5"},
    ),
    # A pool's bundle (PEM), named by any CA the pool has had: verifiers fetch it without credentials.
    Route(
        "GET", "/bundle/{caId}", "CertificateAuthoritiesFunction", "certificateAuthorities.bundle", "none",
        summary="A pool's trust bundle",
        description="The PEM certificates a verifier of the pool's machines should trust: the active "
        "CA, the prepared one (a rotation in progress), then every retired CA whose certificates may "
        "still be valid, each followed by its chain. `caId` is any CA the pool has had "
        "(certificateAuthorities/get's `bundleUrl` names its first): the URL stays the same across "
        "rotations. Fetch it at least once per propagation period (the pool's caPropagationSeconds) "
        "and every machine certificate verifies. No credentials: it holds public certificates only. "
        "See docs/pki.md.",
        example={"caId": "ca_01m8nz6smg0chzvz0b58z6hma5"},
    ),
    # levers9's JoinMachine (grpc-gateway JSON): its schemas are hand-written (joinplane.contract.levers9),
    # exactly as the contract has them, since a pydantic schema would not say proto3 JSON (either
    # field name, int64 as a string); a contract test holds them to the answers' TypedDicts
    # (join_views.JoinMachineResponse, ...).
    Route(
        "POST", "/machines/join", "MachineJoinFunction", "ControlPlaneService_JoinMachine", "join-token",
        summary="Join machine",
        description="levers9's JoinMachine. 200: admitted (`ok: true`, identity and bootstrap). 202: "
        "deferred to an operator (`joinRequest`); retry with the same key after `retryAfterSeconds`. A "
        "join that hands out credentials for an identity that already exists needs `Joinplane-Proof`. "
        "See docs/join.md.",
        example={
            "joinToken": "jpt_01m8nz6smg0chzvz0b58z6hma5_nd96v84g4q2p5cd1pr2rhpe0g1qwgdet",
            "hostname": "gpu-01",
            "os": "linux",
            "arch": "amd64",
            "cpuCount": 64,
            "memoryMb": "524288",
            "gpuCount": 8,
            "csr": EXAMPLE_CSR,
        },
    ),
    Route(
        "POST", "/machines/renew", "MachineJoinFunction", "Joinplane_RenewMachine", "none",
        summary="Renew a machine's certificate",
        description="Joinplane's extension of levers9's JoinMachine: a new certificate for the machine "
        "token's machine; the key may change (sign the proof with the old key and send it as `key=`). "
        "Needs `Joinplane-Proof`.",
        example={"machineToken": EXAMPLE_MACHINE_TOKEN, "csr": EXAMPLE_CSR},
    ),
    # Sylve's accept-join: a node posts to `https://<leader>/api/cluster/accept-join`; the contract
    # documents the path without the API's `/api` base. Both are the one endpoint.
    Route(
        "POST", "/cluster/accept-join", "ClusterJoinFunction", "clusterAcceptJoin", "cluster-key",
        summary="Accept Join",
        description="Sylve's accept-join: accept a join request from a cluster node, authenticated by "
        "the pool's cluster key. The order is the contract: credential (403/401), size (413), body "
        "(400), then the leader's checks (409).",
        example=EXAMPLE_ACCEPT_JOIN,
    ),
    Route(
        "POST", "/api/cluster/accept-join", "ClusterJoinFunction", "clusterAcceptJoinApi", "cluster-key",
        summary="Accept Join (Sylve's /api path)",
        description="Sylve's accept-join: accept a join request from a cluster node, authenticated by "
        "the pool's cluster key. The order is the contract: credential (403/401), size (413), body "
        "(400), then the leader's checks (409). The same endpoint at the path a Sylve node posts to.",
        example=EXAMPLE_ACCEPT_JOIN,
    ),
    # The operator console (docs/console.md): a page and its files, no auth (the page has no
    # privileges; each API call it makes carries the operator's key). Not API: no client calls an
    # operation here, so the OpenAPI document leaves them out (`API` below).
    Route("GET", "/console", "ConsoleFunction", "console.page", "none"),
    Route("GET", "/console/{path+}", "ConsoleFunction", "console.asset", "none"),
)
# fmt: on

# The routes the OpenAPI document describes: every route but the console's page and files.
API: tuple[Route, ...] = tuple(route for route in ROUTES if route.function != "ConsoleFunction")


def of_function(function: str) -> tuple[Route, ...]:
    return tuple(route for route in ROUTES if route.function == function)


def at(method: str, path: str) -> Route:
    for route in ROUTES:
        if (route.method, route.path) == (method, path):
            return route
    raise LookupError(f"no route {method} {path}")
