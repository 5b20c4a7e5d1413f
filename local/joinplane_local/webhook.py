"""EventBridge API destinations, emulated: the template's `AWS::Events::Rule` targets that are an
`AWS::Events::ApiDestination` (the operators' webhook), read from the template and delivered the
way EventBridge delivers them. The loop that drains the rule's queue is `event_rules.ApiDestinationConsumer`;
this module holds what it applies to each event:

- the input transformer (`transform`), by EventBridge's documented rules
  (docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html):
  `InputPathsMap` values are JSON paths in dot notation (`$.detail.requestId`, `$.a[0]`); in a
  template that is JSON (an object or array), a placeholder in a value position becomes the
  value's JSON (`<requestId>` → `"jreq_…"`) and a placeholder inside a JSON string becomes the
  value's text, unescaped (EventBridge does not escape it either); in a plain-string template
  every placeholder becomes the value's text. A path the event does not have creates no variable:
  its placeholder is left out. A JSON result is minified, as EventBridge passes it on.
- the request (`deliver`), as an API destination makes it
  (docs.aws.amazon.com/eventbridge/latest/userguide/eb-api-destinations.html): the destination's
  method and endpoint, the connection's authorization header, EventBridge's User-Agent and
  Content-Type, a 5 s timeout, no redirects followed. 429, 5xx, timeouts and refused connections
  are retried (after the longer of the backoff and `Retry-After`); any other status is a failure
  that is not retried.

`InvocationRateLimitPerSecond` spaces the requests out (one consumer, one request at a time).
Not emulated: OAuth connections, `HttpParameters` of the target, requests in parallel.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .template import Template, referenced_logical_id

USER_AGENT = "Amazon/EventBridge/ApiDestinations"
CONTENT_TYPE = "application/json; charset=utf-8"
TIMEOUT_SECONDS = 5.0
# EventBridge's RetryPolicy defaults when a target sets none.
DEFAULT_RETRY_ATTEMPTS = 185
DEFAULT_EVENT_AGE_SECONDS = 86400

_PLACEHOLDER = re.compile(r"<([A-Za-z0-9_.\-]+)>")
_PATH_STEP = re.compile(r"\.([A-Za-z0-9_\-/]+)|\[(\d+)\]")


# --- the input transformer ---------------------------------------------------------------------


def extract(event: Any, path: str) -> tuple[bool, Any]:
    """A JSON path in EventBridge's dot notation applied to `event`: (found, value)."""
    text = path.strip()
    if not text.startswith("$"):
        raise ValueError(f"JSON path {path!r} must start with $")
    value, position = event, 1
    while position < len(text):
        step = _PATH_STEP.match(text, position)
        if step is None:
            raise ValueError(f"JSON path {path!r}: only dot notation and array indices are emulated")
        key, index = step.groups()
        if key is not None:
            if not isinstance(value, dict) or key not in value:
                return False, None
            value = value[key]
        else:
            if not isinstance(value, list) or int(index) >= len(value):
                return False, None
            value = value[int(index)]
        position = step.end()
    return True, value


def _text(value: Any) -> str:
    """A value's text inside a JSON string: a string as it is (unescaped), anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def transform(
    input_transformer: dict[str, Any], event: dict[str, Any], *, rule_name: str, rule_arn: str
) -> str:
    """The body EventBridge sends the target for `event` through `input_transformer`."""
    template = str(input_transformer.get("InputTemplate", ""))
    variables: dict[str, Any] = {}
    for name, path in (input_transformer.get("InputPathsMap") or {}).items():
        found, value = extract(event, str(path))
        if found:
            variables[str(name)] = value
    without_detail = {k: v for k, v in event.items() if k != "detail"}
    variables.update(
        {
            "aws.events.rule-arn": rule_arn,
            "aws.events.rule-name": rule_name,
            "aws.events.event": without_detail,
            "aws.events.event.json": event,
            "aws.events.event.ingestion-time": event.get("time"),
        }
    )
    is_json = template.lstrip()[:1] in ("{", "[")
    out: list[str] = []
    in_string = False
    position = 0
    while position < len(template):
        char = template[position]
        if in_string and char == "\\":
            out.append(template[position : position + 2])
            position += 2
            continue
        if char == '"':
            in_string = not in_string
        elif char == "<":
            placeholder = _PLACEHOLDER.match(template, position)
            if placeholder is not None and (
                placeholder.group(1) in variables or placeholder.group(1) in _declared(input_transformer)
            ):
                name = placeholder.group(1)
                if name in variables:
                    value = variables[name]
                    out.append(json.dumps(value) if is_json and not in_string else _text(value))
                position = placeholder.end()
                continue
        out.append(char)
        position += 1
    result = "".join(out)
    if is_json:
        try:
            return json.dumps(json.loads(result), separators=(",", ":"), ensure_ascii=False)
        except ValueError:
            return result  # EventBridge does not validate what it sends; neither does this
    return result


def _declared(input_transformer: dict[str, Any]) -> set[str]:
    return {str(name) for name in (input_transformer.get("InputPathsMap") or {})}


# --- the template's API destination targets ---------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    maximum_retry_attempts: int = DEFAULT_RETRY_ATTEMPTS
    maximum_event_age_seconds: float = DEFAULT_EVENT_AGE_SECONDS


@dataclass(frozen=True)
class ApiDestinationTarget:
    """One target of one rule, resolved for this run. `headers` carry the connection's secret: it
    is left out of the repr, and `describe()` names the endpoint's host only (a chat webhook's
    path is often a secret too)."""

    rule: str  # the rule's logical id
    target_id: str
    bus: str
    pattern: dict[str, Any]
    enabled: bool
    endpoint: str
    method: str
    headers: dict[str, str] = field(repr=False)
    input_transformer: dict[str, Any] | None
    input_path: str | None
    retry: RetryPolicy
    dead_letter_queue: str | None  # the DLQ's queue name
    rate_limit: float | None = None  # InvocationRateLimitPerSecond

    def describe(self) -> str:
        parts = urlsplit(self.endpoint)
        auth = f" ({', '.join(sorted(self.headers))} header)" if self.headers else ""
        return (
            f"EventBridge bus {self.bus} {json.dumps(self.pattern)} → API destination "
            f"{self.method} {parts.scheme}://{parts.netloc}/…{auth}"
        )


def _connection_headers(template: Template, connection: dict[str, Any]) -> dict[str, str]:
    props = template.resolve(connection.get("Properties") or {})
    auth = props.get("AuthParameters") or {}
    headers: dict[str, str] = {}
    api_key = auth.get("ApiKeyAuthParameters")
    if api_key and str(api_key.get("ApiKeyValue", "")):
        headers[str(api_key["ApiKeyName"])] = str(api_key["ApiKeyValue"])
    basic = auth.get("BasicAuthParameters")
    if basic:
        pair = f"{basic.get('Username', '')}:{basic.get('Password', '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    invocation = (auth.get("InvocationHttpParameters") or {}).get("HeaderParameters") or []
    for header in invocation:
        headers[str(header["Key"])] = str(header["Value"])
    return headers


def _queue_name(template: Template, logical_id: str) -> str:
    props = template.resolve(template.resources[logical_id].get("Properties") or {})
    return str(props.get("QueueName") or template.names.ref(logical_id))


def api_destination_targets(template: Template) -> list[ApiDestinationTarget]:
    """Every rule target of the template that is an API destination, in this run: a rule or
    destination whose `Condition` is false (the webhook URL left empty) is not there."""
    targets = []
    for logical_id, rule in template.of_type("AWS::Events::Rule").items():
        if not template.included(logical_id):
            continue
        raw = rule.get("Properties") or {}
        for target in raw.get("Targets") or []:
            destination_id = referenced_logical_id(target.get("Arn"), "Arn")
            destination = template.resources.get(destination_id or "")
            if destination is None or destination.get("Type") != "AWS::Events::ApiDestination":
                continue
            if not template.included(str(destination_id)):
                continue
            destination_props = template.resolve(destination.get("Properties") or {})
            endpoint = str(destination_props["InvocationEndpoint"])
            if urlsplit(endpoint).scheme not in ("http", "https"):
                # EventBridge takes HTTPS only; plain HTTP is let through for a receiver on this machine.
                raise ValueError(f"{destination_id}: InvocationEndpoint must be an http(s) URL")
            connection_id = referenced_logical_id(
                destination.get("Properties", {}).get("ConnectionArn"), "Arn"
            )
            connection = template.resources.get(connection_id or "") or {}
            dead_letter = referenced_logical_id((target.get("DeadLetterConfig") or {}).get("Arn"), "Arn")
            retry = template.resolve(target.get("RetryPolicy") or {})
            bus = template.resolve(raw.get("EventBusName", "default"))
            targets.append(
                ApiDestinationTarget(
                    rule=logical_id,
                    target_id=str(target.get("Id", "target")),
                    bus=str(bus),
                    pattern=template.resolve(raw.get("EventPattern") or {}),
                    enabled=str(template.resolve(raw.get("State", "ENABLED"))).upper() == "ENABLED",
                    endpoint=endpoint,
                    method=str(destination_props.get("HttpMethod", "POST")).upper(),
                    headers=_connection_headers(template, connection),
                    input_transformer=template.resolve(target["InputTransformer"])
                    if target.get("InputTransformer")
                    else None,
                    input_path=target.get("InputPath"),
                    retry=RetryPolicy(
                        int(retry.get("MaximumRetryAttempts", DEFAULT_RETRY_ATTEMPTS)),
                        float(retry.get("MaximumEventAgeInSeconds", DEFAULT_EVENT_AGE_SECONDS)),
                    ),
                    dead_letter_queue=_queue_name(template, dead_letter) if dead_letter else None,
                    rate_limit=float(destination_props["InvocationRateLimitPerSecond"])
                    if destination_props.get("InvocationRateLimitPerSecond")
                    else None,
                )
            )
    return targets


def body_for(target: ApiDestinationTarget, event: dict[str, Any], *, rule_name: str, rule_arn: str) -> str:
    if target.input_transformer:
        return transform(target.input_transformer, event, rule_name=rule_name, rule_arn=rule_arn)
    if target.input_path:
        found, value = extract(event, target.input_path)
        return json.dumps(value if found else None, separators=(",", ":"))
    return json.dumps(event, separators=(",", ":"))


# --- one request -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    retryable: bool
    code: str  # the HTTP status, or the error's kind
    message: str
    retry_after: float | None = None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is the answer, as for EventBridge


_OPENER = urllib.request.build_opener(_NoRedirects)


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the backoff alone decides


def deliver(target: ApiDestinationTarget, body: str) -> Outcome:
    """One request to the destination. Never raises for the endpoint's failures: they are outcomes."""
    request = urllib.request.Request(  # noqa: S310 - the endpoint's scheme is checked when it is read
        target.endpoint,
        data=body.encode(),
        method=target.method,
        headers={
            **target.headers,
            "User-Agent": USER_AGENT,
            "Content-Type": CONTENT_TYPE,
            "Connection": "close",
        },
    )
    try:
        with _OPENER.open(request, timeout=TIMEOUT_SECONDS) as response:
            status = int(response.status)
            response.read()
    except urllib.error.HTTPError as error:
        status = int(error.code)
        retry_after = _retry_after(error.headers.get("Retry-After") if error.headers else None)
        error.close()
        retryable = status == 429 or status >= 500
        return Outcome(False, retryable, str(status), f"HTTP {status}", retry_after)
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        return Outcome(False, True, type(reason).__name__, str(reason))
    if 200 <= status < 300:
        return Outcome(True, False, str(status), "delivered")
    return Outcome(False, False, str(status), f"HTTP {status}")
