"""What verifiers fetch without credentials: a CA's revocation list (GET /crl/{caId}, DER) and a
pool's trust bundle (GET /bundle/{caId}, PEM). Answers that are not JSON, so written by hand."""

from __future__ import annotations

import copy

from joinplane import ids
from joinplane.contract.common import RETRY_AFTER, TAGS, Schema, content, ecma, one_of_content
from joinplane.routes import Route

# Each route's answer: its media type and what the 200 and the 404 say.
_ANSWERS = {
    "certificateAuthorities.crl": (
        "application/pkix-crl",
        "The CRL. `Cache-Control: public, max-age=<at most 300>`.",
        "NOT_FOUND: no CA by that id (or one that has not signed yet), or no unexpired intermediate",
    ),
    "certificateAuthorities.bundle": (
        "application/pem-certificate-chain",
        "The bundle. `Cache-Control: public, max-age=300`.",
        "NOT_FOUND: no CA by that id (or a certificate request's)",
    ),
}


# Whose id the path names: a CA's, or, for a CRL, also a per-container intermediate's (the
# intermediate signing mode: docs/pki.md).
_PREFIXES = {"certificateAuthorities.crl": "(ca|int)", "certificateAuthorities.bundle": "ca"}


def operation(route: Route) -> Schema:
    """The route's GET, in the words of its row of the route table."""
    media, found, absent = _ANSWERS[route.operation]
    assert route.example is not None, route
    ok: Schema = {
        "description": found,
        "headers": {"Cache-Control": {"schema": {"type": "string"}, "description": "public, max-age=N"}},
        "content": {media: {"schema": {"type": "string", "contentMediaType": media}}},
    }
    either = one_of_content("#/components/schemas/Error", "#/components/schemas/GatewayMessage")
    return {
        "get": {
            "tags": [TAGS["certificateAuthorities"][0]],
            "summary": route.summary,
            "description": route.description,
            "parameters": [
                {
                    "name": "caId",
                    "in": "path",
                    "required": True,
                    "schema": {
                        "type": "string",
                        "pattern": f"^{_PREFIXES[route.operation]}_{ecma(ids.ULID_PATTERN)}$",
                    },
                    "example": copy.deepcopy(route.example["caId"]),
                }
            ],
            "responses": {
                "200": ok,
                "404": {"description": absent, "content": content("#/components/schemas/Error")},
                "500": {"description": "INTERNAL", "content": either},
                "503": {
                    "description": "UNAVAILABLE: the key store or table is unavailable; retry",
                    "headers": RETRY_AFTER,
                    "content": copy.deepcopy(either),
                },
            },
        }
    }
