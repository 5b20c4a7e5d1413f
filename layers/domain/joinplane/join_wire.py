"""levers9 JoinMachine's dialect for `POST /machines/join` and `/machines/renew`: grpc-gateway JSON.

Requests are read with proto3 JSON (protojson) rules, so a client generated from the levers9
OpenAPI/proto works unchanged: fields by JSON name (`cpuCount`) or proto name (`cpu_count`);
int64/uint64 as a JSON number or a decimal string; `null` means the default; the same field given
twice (once per name) is an error. One deliberate difference from grpc-gateway's default
marshaller: unknown fields are refused (code 3) instead of discarded, so a misspelt field cannot
silently drop a fact an attestor needed.

Responses follow grpc-gateway v2's defaults: every field of JoinMachine's response message is emitted
(EmitUnpopulated), int64 values as strings. Errors are `rpcStatus` `{code, message, details}` with
the gRPC code and grpc-gateway's HTTP status for it; `details` carries a google.rpc.ErrorInfo whose
`reason` (joinplane.errors' catalogue) tells refusals apart without reading `message`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from joinplane.errors import DOMAIN, InvalidArgument, JoinplaneError, RetryLater
from joinplane.http import json_response

if TYPE_CHECKING:
    from joinplane import join_views, views

MAX_BODY_BYTES = 64 * 1024
MAX_STRING = 256
MAX_PEM = 16 * 1024
MAX_ITEMS = 64
M = TypeVar("M", bound="_Message")

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
    """`details` holds one google.rpc.ErrorInfo (every error) and, for RetryLater, gRPC's own retry
    hint google.rpc.RetryInfo as well (HTTP's is Retry-After). JoinMachine's contract types details as
    `protobufAny` (`@type` plus the message's fields), which both are."""
    code, status = GRPC.get(error.code, (13, 500))
    details = [error_info(error)]
    headers: dict[str, str] = {}
    if isinstance(error, RetryLater):
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{error.retry_after_seconds}s",
            }
        )
        headers["retry-after"] = str(error.retry_after_seconds)
    return json_response(status, {"code": code, "message": error.message, "details": details}, headers)


# --- reading proto3 JSON -----------------------------------------------------------------------
#
# Pydantic models, like the operator API's; protojson's scalar rules are field types (`Text`,
# `Int64`, ...) whose validators take the raw JSON value, so nothing is coerced that protojson would
# refuse. What pydantic has no setting for is one `before` validator every message shares: a
# field by either of its names but not both, `null` as absent, unknown fields refused by path.
# Models build their validators on first use (`defer_build`): the import is the cold start.


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _integer(*, unsigned: bool, bits: int = 64) -> Callable[[Any], int]:
    """int64/uint64: a JSON number with no fraction, or a decimal string (proto3 JSON allows both)."""
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)

    def check(value: Any) -> int:
        if isinstance(value, bool):
            raise PydanticCustomError("proto", "expected an integer, got a boolean")
        if isinstance(value, int):
            number = value
        elif (isinstance(value, float) and value.is_integer()) or (
            isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,20}", value)
        ):
            number = int(value)
        else:
            raise PydanticCustomError("proto", "{value} is not an integer", {"value": json.dumps(value)[:40]})
        if not low <= number <= high:
            raise PydanticCustomError("proto", "{number} is out of range", {"number": number})
        return number

    return check


def _text(limit: int) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise PydanticCustomError("proto", "expected a string")
        if len(value) > limit:
            raise PydanticCustomError("proto", "longer than {limit} characters", {"limit": limit})
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (`"\ud800"`) is valid JSON but no string DynamoDB or a certificate holds.
            raise PydanticCustomError("proto", "not valid Unicode text") from None
        return value

    return check


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise PydanticCustomError("proto", "expected true or false")
    return value


def _array(value: Any) -> Any:
    if not isinstance(value, list):
        raise PydanticCustomError("proto", "expected an array")
    if len(value) > MAX_ITEMS:
        raise PydanticCustomError("proto", "more than {limit} items", {"limit": MAX_ITEMS})
    return value


_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def _base64(limit: int) -> Callable[[Any], str]:
    """Standard base64, padded (what `base64 -w0` writes), decoding to at most `limit` bytes."""
    text = _text(4 * ((limit + 2) // 3))

    def check(value: Any) -> str:
        checked = text(value)
        if checked and not _BASE64.fullmatch(checked):
            raise PydanticCustomError("proto", "expected standard base64 (padded)")
        return checked

    return check


Text = Annotated[str, PlainValidator(_text(MAX_STRING))]
LongText = Annotated[str, PlainValidator(_text(1024))]
Pem = Annotated[str, PlainValidator(_text(MAX_PEM))]
Int64 = Annotated[int, PlainValidator(_integer(unsigned=False))]
UInt64 = Annotated[int, PlainValidator(_integer(unsigned=True))]
Flag = Annotated[bool, PlainValidator(_flag)]
Texts = Annotated[tuple[Text, ...], BeforeValidator(_array)]


# Errors about a field's name rather than its value: reported as "<what> <path of the field>".
_FIELD_ERRORS = {"unknown_field": "unknown field", "duplicate_field": "duplicate field"}


class _Message(BaseModel):
    """A proto3 message read from JSON: fields by JSON name (`cpuCount`) or proto name (`cpu_count`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _by_json_name(cls, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise PydanticCustomError("proto", "expected a JSON object")
        known = cls.model_fields
        fields: dict[str, Any] = {}
        for key, value in data.items():
            name = key if key in known else _proto_names(cls).get(key)
            if name is None:
                raise PydanticCustomError("unknown_field", _FIELD_ERRORS["unknown_field"], {"name": key})
            if name in fields:
                raise PydanticCustomError("duplicate_field", _FIELD_ERRORS["duplicate_field"], {"name": name})
            fields[name] = value
        return {name: value for name, value in fields.items() if value is not None}


@functools.cache
def _proto_names(message: type[_Message]) -> dict[str, str]:
    return {_snake(name): name for name in message.model_fields}


def _path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def _decode(message: type[M], data: Any) -> M:
    """Validate, reporting the first failure in protojson's words (a field path, what is wrong)."""
    try:
        return message.model_validate(data)
    except ValidationError as invalid:
        first = invalid.errors(include_url=False, include_input=False)[0]
        where = _path(first["loc"])
        if first["type"] in _FIELD_ERRORS:
            field_path = _path((*first["loc"], first["ctx"]["name"]))
            raise InvalidArgument(f"{_FIELD_ERRORS[first['type']]} {field_path}") from None
        raise InvalidArgument(f"invalid value for {where or 'body'}: {first['msg']}") from None


class PreflightCheck(_Message):
    name: Text = ""
    ok: Flag = False
    message: LongText = ""
    severity: Text = ""


class Hardware(_Message):
    serialNumber: Text = ""
    systemUuid: Text = ""
    macAddresses: Texts = ()


# A TPM2B_PUBLIC of an RSA-4096 key is under 700 bytes; the recovered secret is 32.
TpmPublic = Annotated[str, PlainValidator(_base64(1024))]
TpmSecret = Annotated[str, PlainValidator(_base64(64))]


class Activation(_Message):
    """The retry of a TPM join: the secret the TPM recovered from the challenge."""

    secret: TpmSecret = ""


class Tpm(_Message):
    ekPublicKeySha256: Text = ""
    ekCertificatePem: Pem = ""
    ekPublic: TpmPublic = ""  # the EK's TPM2B_PUBLIC, as tpm2_createek -u writes it
    akPublic: TpmPublic = ""  # the AK's TPM2B_PUBLIC, as tpm2_createak -u writes it
    activation: Activation | None = None

    @field_validator("ekPublicKeySha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        if value and not re.fullmatch(r"[0-9a-f]{64}", value.lower()):
            raise PydanticCustomError("proto", "expected 64 hex characters")
        return value.lower()


def _headers(value: Any) -> dict[str, str]:
    """A map<string, string> of HTTP headers: token names, printable ASCII values (a session
    token is long, a CR or LF never allowed)."""
    if not isinstance(value, dict):
        raise PydanticCustomError("proto", "expected a JSON object of header names and values")
    if len(value) > 16:
        raise PydanticCustomError("proto", "more than 16 headers")
    for name, text in value.items():
        if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
            raise PydanticCustomError("proto", "{name} is not a header name", {"name": json.dumps(name)[:70]})
        if not isinstance(text, str) or not re.fullmatch(r"[\x20-\x7e]{0,4096}", text):
            raise PydanticCustomError("proto", "the value of {name} is not a header value", {"name": name})
    return dict(value)


class AwsIam(_Message):
    """The AWS IAM join method (docs/aws.md): a join token named by its id (not a secret) and an
    sts:GetCallerIdentity request the machine signed with its AWS credentials."""

    tokenId: Text = ""
    headers: Annotated[dict[str, str], PlainValidator(_headers)] = Field(default_factory=dict)
    body: Text = ""


class JoinMachineRequest(_Message):
    """`controlplaneJoinMachineRequest` plus Joinplane's additive fields (csr, hardware, tpm, dryRun)."""

    joinToken: Text = ""
    machineFingerprint: Text = ""
    hostname: Text = ""
    os: Text = ""
    arch: Text = ""
    cpuCount: Int64 = 0
    memoryMb: UInt64 = 0
    gpu: Texts = ()
    gpuCount: Int64 = 0
    preflight: Annotated[tuple[PreflightCheck, ...], BeforeValidator(_array)] = ()
    # proto3 cannot tell an absent bool from false; absent here means schedulable.
    schedulable: Flag = True
    executor: Text = ""
    cpuMillicores: Int64 = 0
    gpuIds: Texts = ()
    networkSlotPoolSize: Int64 = 0
    containerStartConcurrency: Int64 = 0
    workerImage: Text = ""
    capabilities: Texts = ()
    csr: Pem = ""
    hardware: Hardware = Field(default_factory=Hardware)
    tpm: Tpm = Field(default_factory=Tpm)
    awsIam: AwsIam | None = None
    dryRun: Flag = False


class RenewMachineRequest(_Message):
    machineToken: Text = ""
    csr: Pem = ""


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body or b"{}")
    except (ValueError, RecursionError) as invalid:
        # ValueError covers JSONDecodeError, bad UTF-8 and integers past Python's digit limit.
        raise InvalidArgument(f"request body is not valid JSON: {str(invalid)[:200]}") from None


def decode_join(body: bytes) -> JoinMachineRequest:
    return _decode(JoinMachineRequest, parse_json(body))


def decode_renew(body: bytes) -> tuple[str, str]:
    """`{machineToken, csr}` → (token, csr)."""
    request = _decode(RenewMachineRequest, parse_json(body))
    if not request.csr:
        raise InvalidArgument("csr is required")
    return request.machineToken, request.csr


# --- writing grpc-gateway JSON -----------------------------------------------------------------


class JoinedPool(Protocol):
    """What the join's answer reads of a pool: a `joinplane.dal.pools.Pool`, named by shape because
    a dialect does not import the table's records."""

    @property
    def workspace_id(self) -> str: ...

    @property
    def name(self) -> str: ...


def join_response(
    pool: JoinedPool | None = None,
    *,
    ok: bool = False,
    errMsg: str = "",
    machineId: str = "",
    machineToken: str = "",
    bootstrap: join_views.MachineBootstrapConfig | None = None,
    certificate: str = "",
    caCertificates: str = "",
    certificateExpiresAt: str = "",
    schedulable: bool = False,
    joinRequest: join_views.JoinRequestRef | None = None,
    retryAfterSeconds: int = 0,
) -> join_views.JoinMachineResponse:
    """`controlplaneJoinMachineResponse` with every field present, plus our additive fields; the
    pool joined (if any) names its workspace and itself. Arguments carry the wire's names."""
    return {
        "ok": ok,
        "errMsg": errMsg,
        "workspaceId": pool.workspace_id if pool else "",
        "poolName": pool.name if pool else "",
        "machineId": machineId,
        "machineToken": machineToken,
        "bootstrap": bootstrap,
        "certificate": certificate,
        "caCertificates": caCertificates,
        "certificateExpiresAt": certificateExpiresAt,
        "schedulable": schedulable,
        "joinRequest": joinRequest,
        "retryAfterSeconds": retryAfterSeconds,
    }


def dry_run_response(
    *, ok: bool, errMsg: str, verdict: str, reasons: list[views.AttestorReason]
) -> join_views.JoinMachineResponse:
    """A dry run's answer: nothing joined, the verdict and every attestor's vote."""
    body = join_response(ok=ok, errMsg=errMsg)
    body["dryRun"] = True
    body["verdict"] = verdict
    body["reasons"] = reasons
    return body


def challenge_response(
    credential_blob: str, encrypted_secret: str, expires_at: str
) -> join_views.JoinMachineResponse:
    """The first answer to a TPM join: nothing joined yet, the credential the TPM must activate."""
    body = join_response()
    body["tpmChallenge"] = {
        "credentialBlob": credential_blob,
        "encryptedSecret": encrypted_secret,
        "expiresAt": expires_at,
    }
    return body


def renew_response(
    machine_id: str, certificate: str, ca_certificates: str, certificate_expires_at: str
) -> join_views.RenewMachineResponse:
    return {
        "machineId": machine_id,
        "certificate": certificate,
        "caCertificates": ca_certificates,
        "certificateExpiresAt": certificate_expires_at,
    }
