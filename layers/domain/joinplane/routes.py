"""Every HTTP route, once: the table the handlers bind to, template.yaml's HttpApi events are
checked against (tests/api/test_route_table.py), the OpenAPI document is generated from
(joinplane_local.openapi) and the tests find a route's function by.

Plain data, stdlib only: every HTTP function imports it at cold start (through `joinplane.http`).
The request model and response view are dotted names, `module:attribute`, that only the OpenAPI
generator resolves, so a function never imports pydantic models or views it does not use.

`operation` is the route's OpenAPI operationId, unique across the API; a handler binds to it
(`@routes.operation("pools.create")`). The contracts we speak (levers9's JoinMachine, the
joinRequests API, Sylve's accept-join) keep their own operationIds.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

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


def _operator(function: str, path: str, request: str, response: str) -> Route:
    """An operator route: POST under /api/compute, behind the API key authorizer; its operationId
    is its path after /api/compute with dots (`pools.create`, `clusters.nodes.list`)."""
    tail = path.removeprefix("/api/compute/")
    return Route(
        "POST", path, function, tail.replace("/", "."), "api-key", request, f"joinplane.views:{response}"
    )


ROUTES: tuple[Route, ...] = (
    _operator(
        "ApiKeysFunction", "/api/compute/apiKeys/create", "joinplane.apikeys:CreateApiKey", "ApiKeyCreated"
    ),
    _operator("ApiKeysFunction", "/api/compute/apiKeys/list", "joinplane.apikeys:ListApiKeys", "ApiKeyList"),
    _operator("ApiKeysFunction", "/api/compute/apiKeys/revoke", "joinplane.apikeys:RevokeApiKey", "ApiKey"),
    _operator("ApiKeysFunction", "/api/compute/apiKeys/whoami", "joinplane.apikeys:WhoAmI", "ApiKey"),
    _operator("PoolsFunction", "/api/compute/pools/create", "joinplane.pools:CreatePool", "Pool"),
    _operator("PoolsFunction", "/api/compute/pools/get", "joinplane.pools:PoolRef", "Pool"),
    _operator("PoolsFunction", "/api/compute/pools/list", "joinplane.pools:ListPools", "PoolList"),
    _operator("PoolsFunction", "/api/compute/pools/update", "joinplane.pools:UpdatePool", "Pool"),
    _operator("PoolsFunction", "/api/compute/pools/archive", "joinplane.pools:PoolRef", "Pool"),
    _operator(
        "JoinTokensFunction",
        "/api/compute/joinTokens/create",
        "joinplane.tokens:CreateJoinToken",
        "JoinTokenCreated",
    ),
    _operator(
        "JoinTokensFunction",
        "/api/compute/joinTokens/list",
        "joinplane.tokens:ListJoinTokens",
        "JoinTokenList",
    ),
    _operator(
        "JoinTokensFunction",
        "/api/compute/joinTokens/revoke",
        "joinplane.tokens:RevokeJoinToken",
        "JoinToken",
    ),
    _operator(
        "JoinRequestsFunction",
        "/api/compute/joinRequests/list",
        "joinplane.join_requests:ListJoinRequests",
        "JoinRequestList",
    ),
    _operator(
        "JoinRequestsFunction",
        "/api/compute/joinRequests/get",
        "joinplane.join_requests:GetJoinRequest",
        "JoinRequest",
    ),
    _operator(
        "JoinRequestsFunction",
        "/api/compute/joinRequests/approve",
        "joinplane.join_requests:ApproveJoinRequest",
        "JoinRequest",
    ),
    _operator(
        "JoinRequestsFunction",
        "/api/compute/joinRequests/reject",
        "joinplane.join_requests:DecideJoinRequest",
        "JoinRequest",
    ),
    _operator(
        "MachinesFunction", "/api/compute/machines/list", "joinplane.machines:ListMachines", "MachineList"
    ),
    _operator("MachinesFunction", "/api/compute/machines/get", "joinplane.machines:MachineRef", "Machine"),
    _operator(
        "MachinesFunction", "/api/compute/machines/revoke", "joinplane.machines:RevokeMachine", "Machine"
    ),
    _operator(
        "DiscoveryFunction",
        "/api/compute/discovery/register",
        "joinplane.discovery:RegisterEntry",
        "DiscoveryEntry",
    ),
    _operator(
        "DiscoveryFunction", "/api/compute/discovery/list", "joinplane.discovery:ListEntries", "DiscoveryList"
    ),
    _operator(
        "DiscoveryFunction",
        "/api/compute/discovery/remove",
        "joinplane.discovery:RemoveEntry",
        "DiscoveryEntry",
    ),
    _operator(
        "TpmAllowListFunction", "/api/compute/tpmAllowList/add", "joinplane.tpm_allow:AddKey", "AllowedKey"
    ),
    _operator(
        "TpmAllowListFunction",
        "/api/compute/tpmAllowList/list",
        "joinplane.tpm_allow:ListKeys",
        "AllowedKeyList",
    ),
    _operator(
        "TpmAllowListFunction",
        "/api/compute/tpmAllowList/remove",
        "joinplane.tpm_allow:RemoveKey",
        "AllowedKey",
    ),
    _operator(
        "TpmAllowListFunction",
        "/api/compute/tpmAllowList/manufacturers/add",
        "joinplane.tpm_manufacturers:AddManufacturer",
        "TpmManufacturer",
    ),
    _operator(
        "TpmAllowListFunction",
        "/api/compute/tpmAllowList/manufacturers/list",
        "joinplane.tpm_manufacturers:ListManufacturers",
        "TpmManufacturerList",
    ),
    _operator(
        "TpmAllowListFunction",
        "/api/compute/tpmAllowList/manufacturers/remove",
        "joinplane.tpm_manufacturers:RemoveManufacturer",
        "TpmManufacturer",
    ),
    _operator(
        "AuditEventsFunction",
        "/api/compute/auditEvents/list",
        "joinplane.audit:ListAuditEvents",
        "AuditEventList",
    ),
    _operator(
        "ClustersFunction",
        "/api/compute/clusters/rotateKey",
        "joinplane.clusters.membership:RotateClusterKey",
        "ClusterKeyRotated",
    ),
    _operator(
        "ClustersFunction",
        "/api/compute/clusters/nodes/list",
        "joinplane.clusters.membership:ListClusterNodes",
        "ClusterNodeList",
    ),
    _operator(
        "ClustersFunction",
        "/api/compute/clusters/guests/list",
        "joinplane.clusters.membership:ListClusterGuests",
        "ClusterGuestList",
    ),
    _operator(
        "CertificateAuthoritiesFunction",
        "/api/compute/certificateAuthorities/get",
        "joinplane.authorities:CertificateAuthorityRef",
        "CertificateAuthorities",
    ),
    _operator(
        "CertificateAuthoritiesFunction",
        "/api/compute/certificateAuthorities/rotate",
        "joinplane.authorities:Rotate",
        "CertificateAuthorities",
    ),
    _operator(
        "CertificateAuthoritiesFunction",
        "/api/compute/certificateAuthorities/activate",
        "joinplane.authorities:Activate",
        "CertificateAuthorities",
    ),
    _operator(
        "CertificateAuthoritiesFunction",
        "/api/compute/certificateAuthorities/createCsr",
        "joinplane.authorities:CertificateAuthorityRef",
        "CertificateAuthorityRequest",
    ),
    _operator(
        "CertificateAuthoritiesFunction",
        "/api/compute/certificateAuthorities/importCertificate",
        "joinplane.authorities:ImportCertificate",
        "CertificateAuthorities",
    ),
    # A CA's certificate revocation list (DER), named by its certificates' CRL distribution point:
    # verifiers fetch it without credentials. Its answer is hand-written in the OpenAPI generator.
    Route("GET", "/crl/{caId}", "CertificateAuthoritiesFunction", "certificateAuthorities.crl", "none"),
    # A pool's bundle (PEM), named by any CA the pool has had: verifiers fetch it without credentials.
    Route("GET", "/bundle/{caId}", "CertificateAuthoritiesFunction", "certificateAuthorities.bundle", "none"),
    # levers9's JoinMachine (grpc-gateway JSON): its schemas are hand-written in the OpenAPI generator,
    # exactly as the contract has them, since a pydantic schema would not say proto3 JSON (either
    # field name, int64 as a string); a contract test holds them to the answers' TypedDicts
    # (join_views.JoinMachineResponse, ...).
    Route("POST", "/machines/join", "MachineJoinFunction", "ControlPlaneService_JoinMachine", "join-token"),
    Route("POST", "/machines/renew", "MachineJoinFunction", "Joinplane_RenewMachine", "none"),
    # Sylve's accept-join: a node posts to `https://<leader>/api/cluster/accept-join`; the contract
    # documents the path without the API's `/api` base. Both are the one endpoint.
    Route("POST", "/cluster/accept-join", "ClusterJoinFunction", "clusterAcceptJoin", "cluster-key"),
    Route("POST", "/api/cluster/accept-join", "ClusterJoinFunction", "clusterAcceptJoinApi", "cluster-key"),
    # The operator console (docs/console.md): a page and its files, no auth (the page has no
    # privileges; each API call it makes carries the operator's key). Not API: no client calls an
    # operation here, so the OpenAPI document leaves them out (`API` below).
    Route("GET", "/console", "ConsoleFunction", "console.page", "none"),
    Route("GET", "/console/{path+}", "ConsoleFunction", "console.asset", "none"),
)

# The routes the OpenAPI document describes: every route but the console's page and files.
API: tuple[Route, ...] = tuple(route for route in ROUTES if route.function != "ConsoleFunction")


def of_function(function: str) -> tuple[Route, ...]:
    return tuple(route for route in ROUTES if route.function == function)


def at(method: str, path: str) -> Route:
    for route in ROUTES:
        if (route.method, route.path) == (method, path):
            return route
    raise LookupError(f"no route {method} {path}")
