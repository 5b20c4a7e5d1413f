"""Seed 002's dialect for `POST /machines/join` and `/machines/renew`: grpc-gateway JSON.

Requests are read with proto3 JSON (protojson) rules, so a client generated from the levers9
OpenAPI/proto works unchanged: fields by JSON name (`cpuCount`) or proto name (`cpu_count`);
int64/uint64 as a JSON number or a decimal string; `null` means the default; the same field given
twice (once per name) is an error. One deliberate difference from grpc-gateway's default
marshaller: unknown fields are refused (code 3) instead of discarded, so a misspelt field cannot
silently drop a fact an attestor needed.

Responses follow grpc-gateway v2's defaults: every field of the seed's response message is emitted
(EmitUnpopulated), int64 values as strings. Errors are `rpcStatus` `{code, message, details}` with
the gRPC code and grpc-gateway's HTTP status for it; `details` carries a google.rpc.ErrorInfo whose
`reason` (joinplane.errors' catalogue) tells refusals apart without reading `message`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from joinplane.errors import DOMAIN, InvalidArgument, JoinplaneError, OutOfTime
from joinplane.http import json_response

MAX_BODY_BYTES = 64 * 1024
MAX_STRING = 256
MAX_PEM = 16 * 1024
MAX_ITEMS = 64

# Our error codes → (gRPC code, HTTP status as grpc-gateway maps that code).
GRPC = {
    "INVALID_ARGUMENT": (3, 400),
    "NOT_FOUND": (5, 404),
    "ALREADY_EXISTS": (6, 409),
    "PERMISSION_DENIED": (7, 403),
    # Nothing here raises it; API Gateway's throttling answers 429 itself, and docs/join.md lists 8→429.
    "RESOURCE_EXHAUSTED": (8, 429),
    "PAYLOAD_TOO_LARGE": (8, 413),  # gRPC says RESOURCE_EXHAUSTED for oversize messages; HTTP says 413
    "FAILED_PRECONDITION": (9, 400),
    "INVALID_STATE": (9, 400),
    "ABORTED": (10, 409),
    "INTERNAL": (13, 500),
    "UNAVAILABLE": (14, 503),
    "UNAUTHENTICATED": (16, 401),
}


def error_info(error: JoinplaneError) -> dict[str, Any]:
    """google.rpc.ErrorInfo in proto3 JSON (a protobufAny): the reason a client switches on."""
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": error.reason,
        "domain": DOMAIN,
        "metadata": dict(error.metadata),
    }


def render_error(error: JoinplaneError) -> dict[str, Any]:
    """`details` holds one google.rpc.ErrorInfo (every error) and, for OutOfTime, gRPC's own retry
    hint google.rpc.RetryInfo as well (HTTP's is Retry-After). Seed 002 types details as
    `protobufAny` (`@type` plus the message's fields), which both are."""
    code, status = GRPC.get(error.code, (13, 500))
    details = [error_info(error)]
    headers: dict[str, str] = {}
    if isinstance(error, OutOfTime):
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{error.retry_after_seconds}s",
            }
        )
        headers["retry-after"] = str(error.retry_after_seconds)
    return json_response(status, {"code": code, "message": error.message, "details": details}, headers)


# --- reading proto3 JSON -------------------------------------------------------------------------


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _int(value: Any, name: str, *, unsigned: bool, bits: int = 64) -> int:
    if isinstance(value, bool):
        raise InvalidArgument(f"invalid value for {name}: expected an integer, got a boolean")
    if isinstance(value, int):
        number = value
    elif (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,20}", value)
    ):
        number = int(value)
    else:
        raise InvalidArgument(f"invalid value for {name}: {json.dumps(value)[:40]} is not an integer")
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not low <= number <= high:
        raise InvalidArgument(f"invalid value for {name}: {number} is out of range")
    return number


def _string(value: Any, name: str, limit: int = MAX_STRING) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"invalid value for {name}: expected a string")
    if len(value) > limit:
        raise InvalidArgument(f"invalid value for {name}: longer than {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (`"\ud800"`) is valid JSON but no string DynamoDB or a certificate holds.
        raise InvalidArgument(f"invalid value for {name}: not valid Unicode text") from None
    return value


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"invalid value for {name}: expected true or false")
    return value


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgument(f"invalid value for {name}: expected an array")
    if len(value) > MAX_ITEMS:
        raise InvalidArgument(f"invalid value for {name}: more than {MAX_ITEMS} items")
    return value


def _fields(obj: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
    """An object's fields by JSON name, accepting proto names too; nulls dropped."""
    if not isinstance(obj, dict):
        raise InvalidArgument(f"invalid value for {where or 'body'}: expected a JSON object")
    by_proto = {_snake(name): name for name in known}
    fields: dict[str, Any] = {}
    for key, value in obj.items():
        name = key if key in known else by_proto.get(key)
        if name is None:
            raise InvalidArgument(f"unknown field {where + '.' if where else ''}{key}")
        if name in fields:
            raise InvalidArgument(f"duplicate field {where + '.' if where else ''}{name}")
        if value is not None:
            fields[name] = value
    return fields


@dataclass(frozen=True)
class PreflightCheck:
    name: str = ""
    ok: bool = False
    message: str = ""
    severity: str = ""


@dataclass(frozen=True)
class Hardware:
    serialNumber: str = ""
    systemUuid: str = ""
    macAddresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tpm:
    ekPublicKeySha256: str = ""
    ekCertificatePem: str = ""


@dataclass(frozen=True)
class JoinMachineRequest:
    """`controlplaneJoinMachineRequest` plus Joinplane's additive fields (csr, hardware, tpm, dryRun)."""

    joinToken: str = ""
    machineFingerprint: str = ""
    hostname: str = ""
    os: str = ""
    arch: str = ""
    cpuCount: int = 0
    memoryMb: int = 0
    gpu: tuple[str, ...] = ()
    gpuCount: int = 0
    preflight: tuple[PreflightCheck, ...] = ()
    # proto3 cannot tell an absent bool from false; absent here means schedulable.
    schedulable: bool = True
    executor: str = ""
    cpuMillicores: int = 0
    gpuIds: tuple[str, ...] = ()
    networkSlotPoolSize: int = 0
    containerStartConcurrency: int = 0
    workerImage: str = ""
    capabilities: tuple[str, ...] = ()
    csr: str = ""
    hardware: Hardware = field(default_factory=Hardware)
    tpm: Tpm = field(default_factory=Tpm)
    dryRun: bool = False

    def facts(self) -> dict[str, Any]:
        """What the machine said about itself, as stored on its request and machine records."""
        return {
            "fingerprint": self.machineFingerprint,
            "hostname": self.hostname,
            "os": self.os,
            "arch": self.arch,
            "cpuCount": self.cpuCount,
            "memoryMb": self.memoryMb,
            "gpu": list(self.gpu),
            "gpuCount": self.gpuCount,
            "gpuIds": list(self.gpuIds),
            "executor": self.executor,
            "cpuMillicores": self.cpuMillicores,
            "networkSlotPoolSize": self.networkSlotPoolSize,
            "containerStartConcurrency": self.containerStartConcurrency,
            "capabilities": list(self.capabilities),
            "schedulable": self.schedulable,
            "workerImage": self.workerImage,
            "hardware": {
                "serialNumber": self.hardware.serialNumber,
                "systemUuid": self.hardware.systemUuid,
                "macAddresses": list(self.hardware.macAddresses),
            },
            "tpm": {"ekPublicKeySha256": self.tpm.ekPublicKeySha256} if self.tpm.ekPublicKeySha256 else {},
            "preflight": [vars(check) for check in self.preflight],
        }


_STRINGS = ("joinToken", "machineFingerprint", "hostname", "os", "arch", "executor", "workerImage")
_STRING_LISTS = ("gpu", "gpuIds", "capabilities")
_INT64 = ("cpuCount", "gpuCount", "cpuMillicores", "networkSlotPoolSize", "containerStartConcurrency")
_KNOWN = (
    *_STRINGS,
    *_STRING_LISTS,
    *_INT64,
    "memoryMb",
    "preflight",
    "schedulable",
    "csr",
    "hardware",
    "tpm",
    "dryRun",
)


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body or b"{}")
    except (ValueError, RecursionError) as invalid:
        # ValueError covers JSONDecodeError, bad UTF-8 and integers past Python's digit limit.
        raise InvalidArgument(f"request body is not valid JSON: {str(invalid)[:200]}") from None


def decode_join(body: bytes) -> JoinMachineRequest:
    raw = _fields(parse_json(body), "", _KNOWN)
    values: dict[str, Any] = {}
    for name in _STRINGS:
        if name in raw:
            values[name] = _string(raw[name], name)
    for name in _STRING_LISTS:
        if name in raw:
            values[name] = tuple(_string(v, name) for v in _list(raw[name], name))
    for name in _INT64:
        if name in raw:
            values[name] = _int(raw[name], name, unsigned=False)
    if "memoryMb" in raw:
        values["memoryMb"] = _int(raw["memoryMb"], "memoryMb", unsigned=True)
    for name in ("schedulable", "dryRun"):
        if name in raw:
            values[name] = _bool(raw[name], name)
    if "csr" in raw:
        values["csr"] = _string(raw["csr"], "csr", MAX_PEM)
    if "preflight" in raw:
        checks = []
        for index, check in enumerate(_list(raw["preflight"], "preflight")):
            where = f"preflight[{index}]"
            item = _fields(check, where, ("name", "ok", "message", "severity"))
            checks.append(
                PreflightCheck(
                    name=_string(item.get("name", ""), f"{where}.name"),
                    ok=_bool(item.get("ok", False), f"{where}.ok"),
                    message=_string(item.get("message", ""), f"{where}.message", 1024),
                    severity=_string(item.get("severity", ""), f"{where}.severity"),
                )
            )
        values["preflight"] = tuple(checks)
    if "hardware" in raw:
        item = _fields(raw["hardware"], "hardware", ("serialNumber", "systemUuid", "macAddresses"))
        values["hardware"] = Hardware(
            serialNumber=_string(item.get("serialNumber", ""), "hardware.serialNumber"),
            systemUuid=_string(item.get("systemUuid", ""), "hardware.systemUuid"),
            macAddresses=tuple(
                _string(v, "hardware.macAddresses")
                for v in _list(item.get("macAddresses", []), "hardware.macAddresses")
            ),
        )
    if "tpm" in raw:
        item = _fields(raw["tpm"], "tpm", ("ekPublicKeySha256", "ekCertificatePem"))
        ek_hash = _string(item.get("ekPublicKeySha256", ""), "tpm.ekPublicKeySha256").lower()
        if ek_hash and not re.fullmatch(r"[0-9a-f]{64}", ek_hash):
            raise InvalidArgument("invalid value for tpm.ekPublicKeySha256: expected 64 hex characters")
        values["tpm"] = Tpm(
            ekPublicKeySha256=ek_hash,
            ekCertificatePem=_string(item.get("ekCertificatePem", ""), "tpm.ekCertificatePem", MAX_PEM),
        )
    return JoinMachineRequest(**values)


def decode_renew(body: bytes) -> tuple[str, str]:
    """`{machineToken, csr}` → (token, csr)."""
    raw = _fields(parse_json(body), "", ("machineToken", "csr"))
    token = _string(raw.get("machineToken", ""), "machineToken")
    csr = _string(raw.get("csr", ""), "csr", MAX_PEM)
    if not csr:
        raise InvalidArgument("csr is required")
    return token, csr


# --- writing grpc-gateway JSON -------------------------------------------------------------------


def _sink(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {k: value.get(k, "") for k in ("destination", "credential", "streamPrefix")}


def bootstrap(pool: dict[str, Any], worker_image: str) -> dict[str, Any]:
    """`controlplaneMachineBootstrapConfig` from the pool's defaults, every field present."""
    d = pool.get("bootstrap") or {}
    telemetry = d.get("telemetry")
    billing = d.get("billing")
    return {
        "controlplaneHttpUrl": d.get("controlplaneHttpUrl", ""),
        "controlplaneGrpcHost": d.get("controlplaneGrpcHost", ""),
        "controlplaneGrpcPort": d.get("controlplaneGrpcPort", 0),
        "controlplaneGrpcTls": d.get("controlplaneGrpcTls", False),
        "workspaceId": pool["workspaceId"],
        "poolName": pool["name"],
        "transport": d.get("transport", ""),
        "executor": d.get("executor", ""),
        "fallback": d.get("fallback", ""),
        "disabledServices": d.get("disabledServices", []),
        "imageRegistryStore": d.get("imageRegistryStore", ""),
        "imageClipVersion": str(d.get("imageClipVersion", 0)),  # int64: a string in proto3 JSON
        "imageLocalCacheEnabled": d.get("imageLocalCacheEnabled", False),
        "telemetry": None
        if telemetry is None
        else {
            "enabled": telemetry.get("enabled", False),
            "streamPrefix": telemetry.get("streamPrefix", ""),
            "logs": _sink(telemetry.get("logs")),
            "events": _sink(telemetry.get("events")),
        },
        "billing": None
        if billing is None
        else {
            "usageEndpoint": billing.get("usageEndpoint", ""),
            "usageToken": billing.get("usageToken", ""),
            "costHookEndpoint": billing.get("costHookEndpoint", ""),
            "costHookToken": billing.get("costHookToken", ""),
            "billableMarginPct": billing.get("billableMarginPct", 0),
        },
        "workerImage": worker_image,
    }


def join_response(**fields: Any) -> dict[str, Any]:
    """`controlplaneJoinMachineResponse` with every field present, plus our additive fields."""
    body: dict[str, Any] = {
        "ok": False,
        "errMsg": "",
        "workspaceId": "",
        "poolName": "",
        "machineId": "",
        "machineToken": "",
        "bootstrap": None,
        "certificate": "",
        "caCertificates": "",
        "certificateExpiresAt": "",
        "schedulable": False,
        "joinRequest": None,
        "retryAfterSeconds": 0,
    }
    body.update(fields)
    return body
