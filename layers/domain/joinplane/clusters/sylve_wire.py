"""Sylve's accept-join dialect for `POST /cluster/accept-join`: what a Sylve leader reads and writes.

Every answer is Sylve's `internal.APIResponse` envelope, `{"status", "message", "error", "data"}`
in that order, written with Go's `json.Marshal` bytes (`inventory.go_json_compact`) and gin's
content type. `message` is the machine-readable outcome a Sylve node switches on; `error` is the
detail it shows its operator. That outcome is this dialect's refusal reason (a SylveError's
`reason` is it upper-cased); no `reason` field is added to the envelope: Go's decoder would ignore
it, but the envelope is Sylve's own four fields, byte for byte what a Sylve leader writes, and a
second name for the same outcome would only give a Sylve node two things to disagree on.

Authentication is Sylve's `AuthenticateClusterKey` middleware, narrowed to what Joinplane issues:
- `X-Cluster-Token` (a Sylve cluster JWT) or `Authorization` (an operator API key, or anything
  else) on the request: 403 `cluster_token_forbidden`. Joinplane issues no cluster JWTs, so there
  is none to verify first, and a request never gets to pick the credential that suits it best.
- otherwise exactly one `X-Cluster-Key`, non-empty, without surrounding whitespace: else 401
  `invalid_cluster_key`. API Gateway (payload 2.0) joins repeated headers with ",", which no key
  contains, so two headers are refused even when both carry the right key.

Bodies are read the way a Sylve leader reads them: gin's `ShouldBindJSON`, i.e. Go's
`encoding/json` into `AcceptJoinRequest`, then go-playground's validator:
- names match case-insensitively by Go's folding (which also takes U+017F for `s` and U+212A
  for `k`, but not U+0131 for `i`); unknown fields are ignored, so a newer node's extra fields
  and the `clusterKey` some nodes also put in the body are harmless;
- `null` leaves a field as it was (an array becomes nil); a key given twice decodes into the same
  value again (objects merge, array elements are decoded over the earlier ones), as Go does;
- `guestId`/`recordId` take only whole unsigned 64-bit literals (`1.0`, `1e3`, `-1` are errors);
  any other JSON type mismatch is an error, reported with Go's own text;
- invalid UTF-8 and unpaired surrogate escapes in strings become U+FFFD;
- `nodeId`, `nodeVersion` must be non-empty and `nodeIp` must parse as an IP (`required`, `ip`).
Every failure is 400 `invalid_request_payload`. Type and validation failures carry Go's own text
in `error` (the first type error, as Go reports it; all validation failures, one per line); an
empty body is Go's `EOF`; other malformed JSON is described in Python's words.

Why a hand decoder here when the operator and join dialects use pydantic: none of the rules above
is a pydantic setting. Matching names by Go's case folding, decoding a repeated key over the
earlier value, `null` leaving a field as it was, judging `guestId` by its literal (`1.0` is not a
uint64 to Go), and reporting Go's own first-type-error text after decoding the rest all need the
JSON tokens in order, which pydantic never sees; wrapping them in a model would only move this
decoder into a `before` validator. A Sylve node switches on these answers, so the decoder is Go's.

Where Joinplane is stricter than Go, on purpose: the body must be exactly one JSON value (Go's
decoder ignores whatever follows the first), and a trimmed `nodeId` or `nodeVersion` longer than
128 bytes is refused (they become a key part and a stored attribute; Sylve's own inventory caps
node IDs at 128 bytes).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
from typing import Any, NamedTuple

from joinplane.clusters.inventory import InventoryEntry, InventoryReport, go_json_compact, go_trim_space
from joinplane.errors import JoinplaneError, OutOfTime
from joinplane.http import HttpRequest, retry_headers

MAX_BODY_BYTES = 1 << 20
MAX_ID_BYTES = 128

# --- the envelope ------------------------------------------------------------------------------

# The status of a domain error that is not already in Sylve's words (a SylveError carries its own),
# by its code; every code of joinplane.errors is here (tests/api walks the catalogue) and only a
# bug is a 500. The codes Sylve's own answers use keep Sylve's statuses: 400, 401, 403, 409, 413,
# 503; NOT_FOUND is the router's unknown path.
STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "INVALID_STATE": 409,
    "ABORTED": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}


class SylveError(JoinplaneError):
    """A refusal in Sylve's words: HTTP status, `message` (the outcome), `error` (the detail)."""

    code = "SYLVE"

    def __init__(self, status: int, message: str, error: str | None = None, data: Any = None) -> None:
        # Sylve's outcome is already a stable machine-readable name; it is the reason, upper-cased.
        super().__init__(message, reason=message.upper())
        self.status = status
        self.error = message if error is None else error
        self.data = data


def envelope(
    status: int, outcome: str, message: str, error: str, data: Any, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    body = {"status": outcome, "message": message, "error": error, "data": data}
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json; charset=utf-8", **(headers or {})},
        "body": go_json_compact(body).decode(),
        "isBase64Encoded": False,
    }


def success(message: str, data: Any) -> dict[str, Any]:
    return envelope(200, "success", message, "", data)


def render_error(error: JoinplaneError) -> dict[str, Any]:
    if isinstance(error, SylveError):
        return envelope(error.status, "error", error.message, error.error, error.data)
    if isinstance(error, OutOfTime):
        # The outcome a Sylve node already retries on; the hint is in `error` and Retry-After.
        detail = (
            f"guest_identity_inventory_unavailable: {error.message} "
            f"(retry_after_seconds={error.retry_after_seconds})"
        )
        return envelope(
            503, "error", "guest_identity_inventory_unavailable", detail, None, retry_headers(error)
        )
    if error.code == "UNAVAILABLE":
        detail = f"guest_identity_inventory_unavailable: {error.message}"
        return envelope(
            503, "error", "guest_identity_inventory_unavailable", detail, None, retry_headers(error)
        )
    if error.code == "PAYLOAD_TOO_LARGE":
        return envelope(413, "error", "request_body_too_large", "request_body_too_large", None)
    status = STATUS.get(error.code, 500)
    if status == 500:
        return envelope(500, "error", "internal_error", "internal_error", None)
    # Any other refusal of the domain: the status its code has everywhere, and its reason as the
    # outcome (SylveError's rule read backwards), so a lost race is a 409 a node may retry.
    return envelope(status, "error", error.reason.lower(), error.message, None)


def unauthorized() -> SylveError:
    return SylveError(401, "invalid_cluster_key")


def forbidden() -> SylveError:
    return SylveError(403, "cluster_token_forbidden")


def invalid_payload(detail: str) -> SylveError:
    return SylveError(400, "invalid_request_payload", detail)


def version_mismatch(required: str, offered: str) -> SylveError:
    return SylveError(409, "cluster_version_mismatch", f"leader={required},node={offered}")


def preflight_failed(reason: str) -> SylveError:
    """The leader's join checks (Sylve answers every `inventory`/`joining_node` error so)."""
    return SylveError(409, "guest_identity_join_preflight_failed", reason)


def join_failed(reason: str) -> SylveError:
    return SylveError(400, "cluster_join_failed", reason)


def inventory_conflict(report: InventoryReport) -> SylveError:
    conflicts = go_json_compact([conflict.model_dump() for conflict in report.conflicts]).decode()
    return SylveError(
        409, "guest_identity_inventory_conflict", f"guest_identity_inventory_conflict: {conflicts}", report
    )


# --- authentication header ---------------------------------------------------------------------


def cluster_key(headers: dict[str, str]) -> str:
    """The X-Cluster-Key value, decided on the headers alone (before the body is looked at)."""
    if "x-cluster-token" in headers or "authorization" in headers:
        raise forbidden()
    value = headers.get("x-cluster-key")
    if not value or "," in value or value != go_trim_space(value):
        raise unauthorized()
    return value


def body(request: HttpRequest) -> bytes:
    raw = request.raw_body
    if request.body_size() > MAX_BODY_BYTES:
        raise SylveError(413, "request_body_too_large")
    try:
        return base64.b64decode(raw, validate=True) if request.base64_encoded else raw.encode()
    except ValueError:
        raise invalid_payload("request body is not valid base64") from None


# --- reading the body as Go would --------------------------------------------------------------


class _Number(str):
    """A JSON number as written: Go decides by the literal, not by its value."""


class _Object(list[tuple[str, Any]]):
    """A JSON object's members in order, repeated names kept (Go decodes each of them)."""


class _Slice(NamedTuple):
    element: Any


class _Struct(NamedTuple):
    name: str
    package: str
    fields: dict[str, Any]

    def field_for(self, key: str) -> str | None:
        if key in self.fields:
            return key
        folded = _fold(key)
        return next((name for name in self.fields if _fold(name) == folded), None)


_STRING, _UINT, _BOOL = "string", "uint", "bool"
_ENTRY = _Struct(
    "GuestIdentityInventoryEntry",
    "cluster",
    {"nodeId": _STRING, "guestType": _STRING, "guestId": _UINT, "recordId": _UINT, "name": _STRING},
)
_CONFLICT = _Struct(
    "GuestIdentityInventoryConflict",
    "cluster",
    {"guestId": _UINT, "reason": _STRING, "entries": _Slice(_ENTRY)},
)
_REPORT = _Struct(
    "GuestIdentityInventoryReport",
    "cluster",
    {
        "entries": _Slice(_ENTRY),
        "conflicts": _Slice(_CONFLICT),
        "digest": _STRING,
        "inFlightGuestIds": _Slice(_UINT),
    },
)
_REQUEST = _Struct(
    "AcceptJoinRequest",
    "clusterHandlers",
    {"nodeId": _STRING, "nodeIp": _STRING, "nodeVersion": _STRING, "preflight": _BOOL, "inventory": _REPORT},
)
_UINT_MAX = 2**64 - 1
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


# Go's foldName maps a rune to the smallest of its case-fold orbit. Of the non-ASCII runes only
# U+017F (long s) and U+212A (Kelvin sign) land on ASCII letters, the only letters our names use;
# Python's upper() would also fold others (U+0131 dotless i to I) that Go keeps apart.
_ONTO_ASCII = {"\u017f": "S", "\u212a": "K"}


def _fold(name: str) -> str:
    if name.isascii():
        return name.upper()
    return "".join(char.upper() if char.isascii() else _ONTO_ASCII.get(char, char) for char in name)


def _go_type(kind: Any) -> str:
    if isinstance(kind, _Slice):
        return "[]" + _go_type(kind.element)
    if isinstance(kind, _Struct):
        return f"{kind.package}.{kind.name}"
    return str(kind)


def _zero(kind: Any) -> Any:
    if isinstance(kind, _Struct):
        return {name: _zero(sub) for name, sub in kind.fields.items()}
    if isinstance(kind, _Slice):
        return None
    return {_STRING: "", _UINT: 0, _BOOL: False}[kind]


def _json_kind(value: Any) -> str:
    if isinstance(value, _Number):
        return "number"
    if isinstance(value, _Object):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "bool"
    return "string"


class _Decoder:
    """encoding/json's decoding into a typed value: the first type error is kept (Go goes on
    decoding the rest, then returns it), every other field is still filled in."""

    def __init__(self) -> None:
        self.error: str | None = None

    def _mismatch(self, what: str, kind: Any, struct: str | None, path: tuple[str, ...]) -> None:
        if self.error is None:
            where = f"Go struct field {struct}.{'.'.join(path)}" if struct else "Go value"
            self.error = f"json: cannot unmarshal {what} into {where} of type {_go_type(kind)}"

    def value(self, kind: Any, raw: Any, current: Any, struct: str | None, path: tuple[str, ...]) -> Any:
        if raw is None:
            return None if isinstance(kind, _Slice) else current
        if isinstance(kind, _Struct):
            if not isinstance(raw, _Object):
                self._mismatch(_json_kind(raw), kind, struct, path)
                return current
            for key, item in raw:
                name = kind.field_for(key)
                if name is not None:
                    current[name] = self.value(
                        kind.fields[name], item, current[name], kind.name, (*path, name)
                    )
            return current
        if isinstance(kind, _Slice):
            if not isinstance(raw, list) or isinstance(raw, _Object):
                self._mismatch(_json_kind(raw), kind, struct, path)
                return current
            # Go decodes into the elements an earlier occurrence of the same key left behind.
            earlier = current or []
            return [
                self.value(
                    kind.element,
                    item,
                    earlier[index] if index < len(earlier) else _zero(kind.element),
                    struct,
                    path,
                )
                for index, item in enumerate(raw)
            ]
        if kind == _UINT:
            # uint64 has at most 20 digits; checking the length first also keeps int() away from
            # Python's 4300-digit limit on a hostile literal.
            if (
                isinstance(raw, _Number)
                and raw.isdigit()
                and raw.isascii()
                and len(raw) <= 20
                and int(raw) <= _UINT_MAX
            ):
                return int(raw)
            self._mismatch(
                f"number {raw[:40]}" if isinstance(raw, _Number) else _json_kind(raw), kind, struct, path
            )
            return current
        if kind == _BOOL:
            if isinstance(raw, bool):
                return raw
            self._mismatch(_json_kind(raw), kind, struct, path)
            return current
        if isinstance(raw, str) and not isinstance(raw, _Number):
            return raw if raw.isascii() else _LONE_SURROGATE.sub("\ufffd", raw)
        self._mismatch(_json_kind(raw), kind, struct, path)
        return current


def _reject_constant(literal: str) -> Any:
    raise ValueError(f"invalid character {literal[0]!r} looking for beginning of value")


def _parse(data: bytes) -> Any:
    # Go replaces each byte of invalid UTF-8 inside a string with U+FFFD; outside strings such a
    # byte is a syntax error either way.
    text = data.decode("utf-8", "surrogateescape")
    if not text.isascii():
        text = re.sub(r"[\udc80-\udcff]", "\ufffd", text)
    if not text.strip(" \t\r\n"):
        raise invalid_payload("EOF")
    try:
        return json.loads(
            text,
            object_pairs_hook=_Object,
            parse_int=_Number,
            parse_float=_Number,
            parse_constant=_reject_constant,
        )
    except (json.JSONDecodeError, ValueError) as invalid:
        raise invalid_payload(f"invalid JSON: {invalid}") from None
    except RecursionError:
        raise invalid_payload("invalid JSON: exceeded max depth") from None


def go_parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """net.ParseIP: dotted IPv4 without leading zeros, or IPv6; never a zone (`%eth0`)."""
    if "%" in text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class AcceptJoin(NamedTuple):
    """`AcceptJoinRequest` as a Sylve leader decoded it. `inventory` keeps the decoded Go value
    (nil arrays as None) because the success answer echoes it back as Sylve does."""

    node_id: str
    node_ip: str
    node_version: str
    preflight: bool
    inventory: dict[str, Any]

    @property
    def entries(self) -> list[InventoryEntry]:
        return [InventoryEntry.model_construct(**entry) for entry in self.inventory["entries"] or []]

    @property
    def digest(self) -> str:
        return str(self.inventory["digest"])

    def echo(self) -> dict[str, Any]:
        """The submitted report as Go marshals it back: `inFlightGuestIds` is omitempty."""
        report = dict(self.inventory)
        if not report.get("inFlightGuestIds"):
            report.pop("inFlightGuestIds", None)
        return report


_REQUIRED = (("nodeId", "NodeID"), ("nodeIp", "NodeIP"), ("nodeVersion", "NodeVersion"))


def decode_accept_join(data: bytes) -> AcceptJoin:
    raw = _parse(data)
    decoder = _Decoder()
    decoded = decoder.value(_REQUEST, raw, _zero(_REQUEST), None, ())
    if decoder.error is not None:
        raise invalid_payload(decoder.error)
    failures = []
    for name, go_name in _REQUIRED:
        value = decoded[name]
        tag = "required" if value == "" else "ip" if name == "nodeIp" and go_parse_ip(value) is None else None
        if tag:
            key = f"AcceptJoinRequest.{go_name}"
            failures.append(f"Key: '{key}' Error:Field validation for '{go_name}' failed on the '{tag}' tag")
    if failures:
        raise invalid_payload("\n".join(failures))
    for name in ("nodeId", "nodeVersion"):
        if len(go_trim_space(decoded[name]).encode("utf-8", "replace")) > MAX_ID_BYTES:
            raise invalid_payload(f"{name}: longer than {MAX_ID_BYTES} bytes")
    return AcceptJoin(
        node_id=decoded["nodeId"],
        node_ip=decoded["nodeIp"],
        node_version=decoded["nodeVersion"],
        preflight=decoded["preflight"],
        inventory=decoded["inventory"],
    )
