"""The template's HTTP API routes as API Gateway selects them: each `HttpApi` event of a function,
its Lambda authorizer, and the most specific route for a request (exact paths, then paths with
parameters, then greedy `{proxy+}`, then `$default`; a method beats ANY).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from .functions import Functions
from .template import Template, referenced_logical_id

IMPLICIT_API = "ServerlessHttpApi"
# Route selection order (most specific first), after which a specific method beats ANY.
_EXACT, _PARAMS, _GREEDY, _DEFAULT = range(4)


@dataclass(frozen=True)
class Authorizer:
    name: str
    function: str
    identity_sources: tuple[str, ...]
    ttl_seconds: int


@dataclass(frozen=True)
class Route:
    api: str
    method: str  # upper case; ANY matches every method
    path: str  # as in the template, or "$default"
    function: str
    authorizer: Authorizer | None = None
    _segments: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def create(cls, api: str, method: str, path: str, function: str, authorizer: Authorizer | None) -> Route:
        segments = () if path == "$default" else tuple(path.strip("/").split("/"))
        return cls(api, method.upper(), path, function, authorizer, segments)

    @property
    def route_key(self) -> str:
        return "$default" if self.path == "$default" else f"{self.method} {self.path}"

    @property
    def rank(self) -> tuple[int, int, int]:
        if self.path == "$default":
            kind = _DEFAULT
        elif self._segments and self._segments[-1].endswith("+}"):
            kind = _GREEDY
        elif any(s.startswith("{") for s in self._segments):
            kind = _PARAMS
        else:
            kind = _EXACT
        literals = sum(not s.startswith("{") for s in self._segments)
        return (kind, -literals, 1 if self.method == "ANY" else 0)

    def match(self, method: str, segments: list[str]) -> dict[str, str] | None:
        """Path parameters when this route takes the request, else None."""
        if self.method not in ("ANY", method):
            return None
        if self.path == "$default":
            return {}
        params: dict[str, str] = {}
        for index, pattern in enumerate(self._segments):
            if pattern.startswith("{") and pattern.endswith("+}"):
                rest = segments[index:]
                if not rest or rest == [""]:
                    return None
                params[pattern[1:-2]] = unquote("/".join(rest))
                return params
            if index >= len(segments):
                return None
            if pattern.startswith("{") and pattern.endswith("}"):
                if segments[index] == "":
                    return None
                params[pattern[1:-1]] = unquote(segments[index])
            elif unquote(segments[index]) != pattern:
                return None
        return params if len(segments) == len(self._segments) else None


def _api_properties(template: Template, api: str) -> dict[str, Any]:
    merged = dict(template.document.get("Globals", {}).get("HttpApi", {}))
    merged.update(template.resources.get(api, {}).get("Properties", {}))
    return merged


def _identity_sources(identity: dict[str, Any]) -> tuple[str, ...]:
    sources = [f"$request.header.{h}" for h in identity.get("Headers", [])]
    sources += [f"$request.querystring.{q}" for q in identity.get("QueryStrings", [])]
    sources += [f"$context.{c}" for c in identity.get("Context", [])]
    sources += [f"$stageVariables.{s}" for s in identity.get("StageVariables", [])]
    return tuple(sources)


def _authorizer(template: Template, api: str, name: str) -> Authorizer:
    definitions = _api_properties(template, api).get("Auth", {}).get("Authorizers", {})
    if name not in definitions:
        raise ValueError(f"{api}: route authorizer {name!r} is not in Auth.Authorizers")
    definition = definitions[name]
    if "JwtConfiguration" in definition or "FunctionArn" not in definition:
        raise ValueError(f"{api}.{name}: only Lambda authorizers are emulated")
    if str(definition.get("AuthorizerPayloadFormatVersion", "2.0")) != "2.0":
        raise ValueError(f"{api}.{name}: only AuthorizerPayloadFormatVersion 2.0 is emulated")
    if not definition.get("EnableSimpleResponses", False):
        raise ValueError(f"{api}.{name}: only EnableSimpleResponses: true is emulated")
    function = referenced_logical_id(definition["FunctionArn"], "Arn")
    if function is None:
        raise ValueError(f"{api}.{name}: FunctionArn must be !GetAtt <Function>.Arn of this template")
    # SAM's defaults: the Authorization header, results cached for 300 s.
    identity = definition.get("Identity", {"Headers": ["Authorization"]})
    ttl = int(template.resolve(identity.get("ReauthorizeEvery", 300)))
    return Authorizer(name, function, _identity_sources(identity), ttl)


def routes_from_template(template: Template, functions: Functions) -> list[Route]:
    routes: list[Route] = []
    for logical_id, spec in functions.specs.items():
        for event_name, event in spec.events.items():
            if event.get("Type") != "HttpApi":
                continue
            props = event.get("Properties") or {}
            api = IMPLICIT_API
            if "ApiId" in props:
                api = referenced_logical_id(props["ApiId"], "ApiId") or str(props["ApiId"])
            if str(props.get("PayloadFormatVersion", "2.0")) != "2.0":
                raise ValueError(f"{logical_id}.{event_name}: only PayloadFormatVersion 2.0 is emulated")
            path = str(template.resolve(props.get("Path", "$default")))
            method = str(template.resolve(props.get("Method", "ANY")))
            auth_name = (props.get("Auth") or {}).get("Authorizer") or (
                _api_properties(template, api).get("Auth", {}).get("DefaultAuthorizer")
            )
            authorizer = None if auth_name in (None, "NONE") else _authorizer(template, api, auth_name)
            if authorizer is not None and authorizer.function not in functions.specs:
                raise ValueError(f"{logical_id}.{event_name}: no function {authorizer.function}")
            routes.append(Route.create(api, method, path, logical_id, authorizer))
    return sorted(routes, key=lambda r: (r.path, r.method))


def select_route(routes: list[Route], method: str, raw_path: str) -> tuple[Route, dict[str, str]] | None:
    segments = raw_path.strip("/").split("/") if raw_path.strip("/") else []
    matches = [(r, p) for r in routes if (p := r.match(method, segments)) is not None]
    if not matches:
        return None
    return min(matches, key=lambda m: m[0].rank)
