"""levers9's JoinMachine (/machines/join) and Joinplane's renewal beside it (/machines/renew):
grpc-gateway JSON, written by hand exactly as the contract has it, since a pydantic schema would
not say proto3 JSON (either field name, int64 as a string, `null` as the default), plus the
additive fields docs/join.md lists. tests/contract/test_openapi_document.py holds the answers'
field names to their TypedDicts in joinplane.join_views."""

from __future__ import annotations

import copy

from joinplane import join_requests, join_wire, machines, proof, views
from joinplane.contract.common import JSON, TAGS, Schema, content, nullable
from joinplane.routes import Route

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
    p = nullable
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


def schemas() -> dict[str, Schema]:
    p = nullable
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
        code: {"description": text, "content": content(status)} for code, text in descriptions.items()
    }
    errors["default"] = {"description": "An unexpected error response.", "content": content(status)}
    return errors


# Each operation's request schema, the answers it gives besides the errors, by operationId.
_REQUESTS = {
    "ControlPlaneService_JoinMachine": "#/components/schemas/controlplaneJoinMachineRequest",
    "Joinplane_RenewMachine": "#/components/schemas/joinplaneRenewRequest",
}
_ANSWERS: dict[str, Schema] = {
    "ControlPlaneService_JoinMachine": {
        "200": {
            "description": "A successful response.",
            "content": content("#/components/schemas/controlplaneJoinMachineResponse"),
        },
        "202": {
            "description": "Joinplane: deferred; an operator must decide.",
            "content": content("#/components/schemas/controlplaneJoinMachineResponse"),
        },
    },
    "Joinplane_RenewMachine": {
        "200": {
            "description": "The new certificate.",
            "content": content("#/components/schemas/joinplaneRenewResponse"),
        },
    },
}


def operation(route: Route) -> Schema:
    """One of the two operations, in the words of its row of the route table."""
    return {
        "post": {
            "tags": [TAGS["join"][0]],
            "summary": route.summary,
            "description": route.description,
            "parameters": [PROOF_HEADER],
            "requestBody": {
                "required": True,
                "content": {
                    JSON: {
                        "schema": {"$ref": _REQUESTS[route.operation]},
                        "example": copy.deepcopy(route.example),
                    }
                },
            },
            "responses": {**copy.deepcopy(_ANSWERS[route.operation]), **_grpc_errors()},
        }
    }
