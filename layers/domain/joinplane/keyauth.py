"""Resolving an API key to its principal: the authorizer's whole path, and how the principal
travels in the request context to the route. Free of pydantic on purpose: the authorizer runs
before every operator request, so its cold start is the one users feel most."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from joinplane import credentials
from joinplane.dal import apikeys as apikeys_db
from joinplane.errors import InvalidArgument
from joinplane.grants import Grant, Principal

SECRET_PREFIX = "jpk"
ID_PREFIX = "key"


class Resolution(NamedTuple):
    principal: Principal | None
    # Why there is no principal, for the logs and the AuthorizerRefusals metric (never told to the
    # caller, who only learns the key is not valid): missing, malformed, unknown, mismatch, revoked.
    refusal: str = ""
    key_id: str = ""  # the id the bearer names, when it has one's shape (an id, not a secret)


def resolve(bearer: str) -> Resolution:
    """One GetItem by the id embedded in the secret, then a constant-time digest comparison."""
    if not bearer:
        return Resolution(None, "missing")
    parsed = credentials.parse(bearer, SECRET_PREFIX)
    if parsed is None:
        return Resolution(None, "malformed")
    key_id = f"{ID_PREFIX}_{parsed.ulid}"
    key = apikeys_db.get(key_id, consistent=False)
    if key is None:
        return Resolution(None, "unknown", key_id)
    if not credentials.matches(parsed.secret, key.secret_sha256):
        return Resolution(None, "mismatch", key_id)
    if not key.active:
        return Resolution(None, "revoked", key_id)
    return Resolution(
        Principal(key.key_id, key.tenant_id, tuple(Grant.parse(g) for g in key.grants)), key_id=key_id
    )


def verify(bearer: str) -> Principal | None:
    return resolve(bearer).principal


def authorizer_context(principal: Principal | None) -> dict[str, Any]:
    if principal is None:
        return {}
    return {
        "keyId": principal.key_id,
        "tenantId": principal.tenant_id,
        "grants": json.dumps([str(g) for g in principal.grants]),
    }


def principal_from_context(context: dict[str, Any]) -> Principal | None:
    if not context.get("keyId") or not context.get("tenantId"):
        return None
    try:
        grants = tuple(Grant.parse(g) for g in json.loads(context.get("grants", "[]")))
    except (ValueError, InvalidArgument):
        return None
    return Principal(str(context["keyId"]), str(context["tenantId"]), grants)
