"""The HTTP API as the CLI sees it: POST JSON, read JSON, and turn every failure into one error type.

Three error dialects reach us: the operator API's `{"error": {code, message, details}}`, the machine
endpoints' grpc-gateway `rpcStatus` `{code, message, details}` (numeric gRPC codes), and API
Gateway's own `{"message": ...}` (no route, no Authorization header). `ApiError` holds any of them
with a symbolic `code`, so callers branch on names, never on the dialect; and with the server's
`reason` (the operator envelope's `error.reason`, or the google.rpc.ErrorInfo in an rpcStatus's
`details`), which tells refusals of one code apart (rejected, expired, revoked...) without reading
the English message.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from joinplane_cli import skew
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.version import VERSION

USER_AGENT = f"joinplane-cli/{VERSION}"
DEFAULT_TIMEOUT = 30.0

# gRPC status codes by number, as levers9 JoinMachine's rpcStatus carries them.
GRPC_NAMES = {
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}
# What API Gateway itself answers with only `{"message": ...}`; its throttle (`{"message":"Too Many
# Requests"}`) and an unavailable integration read as the codes the API's own envelopes use.
_GATEWAY_CODES = {
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "PAYLOAD_TOO_LARGE",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
ERROR_DOMAIN = "joinplane"
_TRANSIENT_CODES = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED", "ABORTED", "DEADLINE_EXCEEDED"})


class Unreachable(CliError):
    """No HTTP answer at all."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}", Exit.UNREACHABLE)
        self.url = url
        self.reason = reason


class ApiError(CliError):
    """The server answered with an error."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[Any] | None = None,
        grpc: int | None = None,
        *,
        reason: str = "",
        metadata: dict[str, str] | None = None,
        enveloped: bool = False,
    ) -> None:
        shown = f"{code} ({grpc})" if grpc is not None else code
        super().__init__(
            f"{shown}: {message}" if message else shown,
            Exit.UNAUTHENTICATED if code == "UNAUTHENTICATED" else Exit.ERROR,
        )
        self.status = status
        self.code = code
        self.grpc = grpc
        self.details = details or []
        self.server_message = message
        self.reason = reason
        self.metadata = metadata or {}
        # The answer was a Joinplane error (operator envelope or rpcStatus), not a gateway's or a
        # stranger's: a 404 without it means the route itself is not there.
        self.enveloped = enveloped
        # Seconds the server asked us to wait (its Retry-After), when it said.
        self.retry_after: float | None = None
        # The answer's Date header as sent, for correcting a proof's clock (joinplane_cli.skew).
        self.date: str | None = None

    @property
    def transient(self) -> bool:
        """Worth retrying unchanged: the server said so (UNAVAILABLE, ABORTED...) or a gateway did."""
        return self.code in _TRANSIENT_CODES or self.status in (429, 502, 503, 504)


@dataclass
class Response:
    status: int
    body: dict[str, Any]
    # The server's clock (the Date header), so "expires in" is right on a machine with a bad clock.
    server_time: float | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def now(self) -> float:
        return self.server_time if self.server_time is not None else time.time()


def _server_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


# Far deeper than anything the API sends; a deeper answer would overflow the stack of whatever
# walks it next (a table cell, `-o json`).
MAX_DEPTH = 64


# --- retrying -------------------------------------------------------------------------------
# A 429 (a throttle: API Gateway's own, which says nothing of when, or the local runtime's at a
# function's concurrency limit, with Retry-After) and a 503 (UNAVAILABLE: the store or a cluster too
# busy, the invocation out of time) say that nothing was done: the same request may be sent again,
# more often than after other transient answers. A crowd throttled together must not come back in
# step (it would be throttled together again): each pause is drawn at random below a ceiling that
# doubles per attempt ("full jitter"), and added to whatever the server asked for.
RETRY_STATUSES = frozenset({429, 503})
RETRY_AFTER_MAX = 60.0


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header in seconds (delta-seconds or an HTTP date), within 0 to
    `RETRY_AFTER_MAX`; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        seconds = float(value[:8])  # eight digits are already years: no int() of a huge string
    else:
        at = _server_time(value)
        if at is None:
            return None
        seconds = at - (time.time() if now is None else now)
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


@dataclass
class Retry:
    """How `Client.post` retries a transient answer (`ApiError.transient`)."""

    # Attempts in all, for a 429 or 503, and for any other transient answer.
    throttled_attempts: int = 8
    attempts: int = 3
    base: float = 1.0
    cap: float = 8.0
    # Sleeps; may raise to stop waiting (the agent's SIGTERM).
    sleep: Callable[[float], object] = time.sleep

    def pause(self, failed: ApiError, attempt: int) -> float | None:
        """Seconds to wait after attempt number `attempt` (counted from 0) failed, or None: give up."""
        allowed = self.throttled_attempts if failed.status in RETRY_STATUSES else self.attempts
        if not failed.transient or attempt + 1 >= allowed:
            return None
        ceiling = min(self.cap, self.base * 2.0 ** min(attempt, 32))
        return (failed.retry_after or 0.0) + random.uniform(0.0, ceiling)


# An operator command, as the AWS CLI's standard retry mode: a throttle or a 503 up to 3 attempts in
# all; anything else is the operator's to see at once.
OPERATOR_RETRY = Retry(throttled_attempts=3, attempts=1)


class Unreadable(ValueError):
    """An answer that is not a JSON document we can use; the message completes "the server's answer"."""


def _depth_exceeds(document: Any, limit: int) -> bool:
    pending: list[tuple[Any, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            children = value.values() if isinstance(value, dict) else value
            pending.extend((child, depth + 1) for child in children)
    return False


def decode(raw: bytes) -> Any:
    """The JSON document in `raw`, or `Unreadable`: not UTF-8, not JSON, a number longer than Python
    converts (4300 digits), or nested too deeply for the parser or for us."""
    try:
        document = json.loads(raw)
    except UnicodeDecodeError:
        raise Unreadable("is not UTF-8 text") from None
    except json.JSONDecodeError:
        raise Unreadable("is not JSON") from None
    except ValueError:  # int("1" * 5000): Python's limit on the digits of an integer
        raise Unreadable("holds a number too long to read") from None
    except RecursionError:
        raise Unreadable("is nested too deeply") from None
    if _depth_exceeds(document, MAX_DEPTH):
        raise Unreadable("is nested too deeply")
    return document


def _error_info(details: list[Any]) -> tuple[str, dict[str, str]]:
    """The reason and metadata of the first Joinplane google.rpc.ErrorInfo in `details`."""
    for detail in details:
        if (
            isinstance(detail, dict)
            and detail.get("@type") == ERROR_INFO
            and detail.get("domain") == ERROR_DOMAIN
            and isinstance(detail.get("reason"), str)
        ):
            metadata = detail.get("metadata")
            if not isinstance(metadata, dict):
                metadata = {}
            return detail["reason"], {str(k): str(v) for k, v in metadata.items() if isinstance(v, str)}
    return "", {}


def parse_error(status: int, raw: bytes) -> ApiError:
    try:
        document = decode(raw)
    except Unreadable:
        document = None
    if isinstance(document, dict):
        envelope = document.get("error")
        if isinstance(envelope, dict) and "code" in envelope:
            reason = envelope.get("reason")
            return ApiError(
                status,
                str(envelope["code"]),
                str(envelope.get("message", "")),
                envelope.get("details") if isinstance(envelope.get("details"), list) else None,
                reason=reason if isinstance(reason, str) else "",
                enveloped=True,
            )
        if isinstance(document.get("code"), int):
            number = int(document["code"])
            details = document.get("details") if isinstance(document.get("details"), list) else None
            reason, metadata = _error_info(details or [])
            return ApiError(
                status,
                GRPC_NAMES.get(number, f"CODE_{number}"),
                str(document.get("message", "")),
                details,
                grpc=number,
                reason=reason,
                metadata=metadata,
                enveloped=True,
            )
        if isinstance(document.get("message"), str):
            return ApiError(status, _GATEWAY_CODES.get(status, f"HTTP_{status}"), document["message"])
    text = raw.decode("utf-8", "replace").strip().replace("\n", " ")
    return ApiError(status, f"HTTP_{status}", text[:200] or http.client.responses.get(status, ""))


def _reason(error: BaseException) -> str:
    """A connection failure in words, without the exception class soup."""
    if isinstance(error, urllib.error.URLError) and not isinstance(error, urllib.error.HTTPError):
        error = error.reason if isinstance(error.reason, BaseException) else Exception(str(error.reason))
    if isinstance(error, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(error, socket.gaierror):
        return f"unknown host ({error.strerror})"
    if isinstance(error, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(error, ssl.SSLError):
        return f"TLS failed ({error.reason or error})"
    if isinstance(error, ConnectionResetError | http.client.RemoteDisconnected):
        return "the connection was closed before an answer arrived"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error) or type(error).__name__


def _not_an_api(url: str, path: str, error: ApiError, url_from: str) -> ApiError:
    """A 404 for a route every Joinplane API has: the URL is something else (a typo, a path too many,
    another service). Said as such, rather than as a bare NOT_FOUND, naming the URL and where it came
    from (an old JOINPLANE_URL or a profile is the usual culprit, not the --url the hint would blame)."""
    return ApiError(
        404,
        "NOT_FOUND",
        f"{url} answered 404 for POST {path}, a route every Joinplane API has: is {url} (from {url_from}) "
        "the API's base URL (http://127.0.0.1:3000 for `make run`, or the stage's API Gateway URL, with no "
        "path after it)?",
        reason=error.reason,
    )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Joinplane's API never redirects. urllib would follow a 301/302 with the request's headers,
    the API key and Joinplane-Proof included, to wherever Location points: never follow one."""

    def redirect_request(self, *_: Any, **__: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _redirected(url: str, status: int, location: str | None) -> ApiError:
    where = f" to {location}" if location else ""
    return ApiError(
        status,
        f"HTTP_{status}",
        f"{url} answered with a redirect{where}, which Joinplane's API never does: nothing was sent "
        "there; check --url (the API's own address, e.g. https://... rather than http://...)",
    )


class Client:
    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        url_from: str = "--url",
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise CliError(f"{url_from} must be an http:// or https:// URL, got {url!r}", Exit.USAGE)
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retry = retry  # for every post that names none
        self.url_from = url_from  # where the URL was set, for a person reading a hint about it

    def post(
        self,
        path: str,
        body: dict[str, Any] | Callable[[], dict[str, Any]],
        *,
        bearer: str | None = None,
        proof: Callable[[bytes], str] | None = None,
        retry: Retry | None = None,
    ) -> Response:
        """POST JSON; a 2xx answer comes back, anything else raises ApiError or Unreachable.
        `proof` signs the exact bytes sent (a fresh Joinplane-Proof on every call, retries too);
        a callable `body` is made again for every call too (an AWS IAM join signs each afresh).
        With `retry` (or the client's), a transient answer is asked again as it says; the last one
        is raised."""
        retry = retry or self.retry
        attempt = 0
        corrected = False
        while True:
            sent = time.time()
            try:
                return self._post(path, body, bearer=bearer, proof=proof)
            except ApiError as failed:
                if (
                    proof is not None
                    and not corrected
                    and failed.reason in ("PROOF_STALE", "AWS_REQUEST_STALE")
                    and skew.may_follow(self.url)
                ):
                    # One proof signed again on the server's clock, as AWS SDKs correct a skew.
                    corrected = True
                    server = skew.server_time(failed.metadata, failed.date)
                    if skew.learn(server, sent, time.time()):
                        continue
                pause = None if retry is None else retry.pause(failed, attempt)
                if retry is None or pause is None:
                    raise
            retry.sleep(pause)
            attempt += 1

    def _post(
        self,
        path: str,
        body: dict[str, Any] | Callable[[], dict[str, Any]],
        *,
        bearer: str | None,
        proof: Callable[[bytes], str] | None,
    ) -> Response:
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": USER_AGENT}
        secret = bearer or self.api_key
        if secret:
            headers["Authorization"] = f"Bearer {secret}"
        data = json.dumps(body() if callable(body) else body).encode()
        if proof is not None:
            headers["Joinplane-Proof"] = proof(data)
        request = urllib.request.Request(  # noqa: S310 (the scheme is checked in __init__)
            self.url + path, data=data, headers=headers, method="POST"
        )
        try:
            with _OPENER.open(request, timeout=self.timeout) as answer:
                raw = answer.read()
                status = answer.status
                answer_headers = {k.lower(): v for k, v in answer.headers.items()}
        except urllib.error.HTTPError as failed:
            with failed:
                try:
                    raw = failed.read()
                except (OSError, http.client.HTTPException):
                    raw = b""  # the body broke off: the status alone says what happened
                if 300 <= failed.code < 400:
                    raise _redirected(self.url, failed.code, failed.headers.get("location")) from None
                error = parse_error(failed.code, raw)
                if error.status == 404 and not error.enveloped:
                    raise _not_an_api(self.url, path, error, self.url_from) from None
                error.retry_after = retry_after(failed.headers.get("retry-after"))
                error.date = failed.headers.get("date")
                raise error from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as failed:
            raise Unreachable(self.url, _reason(failed)) from None
        try:
            document = decode(raw or b"{}")
        except Unreadable as unreadable:
            raise ApiError(status, f"HTTP_{status}", f"the server's answer {unreadable}") from None
        if not isinstance(document, dict):
            raise ApiError(status, f"HTTP_{status}", "the server's answer is not a JSON object")
        return Response(status, document, _server_time(answer_headers.get("date")), answer_headers)
