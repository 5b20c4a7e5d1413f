"""Sylve's accept-join (/cluster/accept-join, and /api/cluster/accept-join where a Sylve node posts
it): Sylve's request, read as Go's encoding/json reads it, and Sylve's `{status, message, error,
data}` envelope, written by hand as the contract has them."""

from __future__ import annotations

import copy

from joinplane.clusters import sylve_wire
from joinplane.contract.common import JSON, RETRY_AFTER, TAGS, Schema, content, nullable
from joinplane.routes import Route


def schemas() -> dict[str, Schema]:
    n = nullable  # Go's encoding/json: null leaves the field as it was
    trimmed = f"Required: non-empty, and at most {sylve_wire.MAX_ID_BYTES} bytes of UTF-8, once trimmed."
    uint64 = {"type": "integer", "minimum": 0, "maximum": 2**64 - 1, "description": "a whole literal"}
    entry = {
        "type": "object",
        "properties": {
            "nodeId": n({"type": "string"}),
            "guestType": n({"type": "string"}),
            "guestId": n(uint64),
            "recordId": n(uint64),
            "name": n({"type": "string"}),
        },
    }
    entries = n({"type": "array", "items": {"$ref": "#/components/schemas/SylveInventoryEntry"}})
    return {
        "SylveInventoryEntry": entry,
        "SylveInventoryConflict": {
            "type": "object",
            "properties": {"guestId": n(uint64), "reason": n({"type": "string"}), "entries": entries},
        },
        "SylveInventoryReport": {
            "type": "object",
            "properties": {
                "entries": entries,
                "conflicts": n(
                    {"type": "array", "items": {"$ref": "#/components/schemas/SylveInventoryConflict"}}
                ),
                "digest": n({"type": "string"}),
            },
        },
        "SylveAcceptJoinRequest": {
            "type": "object",
            "description": "Sylve's `InternalHandlersClusterAcceptJoinRequest`, read as Go's "
            "encoding/json reads it: names match case-insensitively, unknown fields are ignored, "
            "`null` leaves a field unset.",
            "required": ["nodeId", "nodeIp", "nodeVersion"],
            "properties": {
                "nodeId": {"type": "string", "minLength": 1, "description": trimmed},
                "nodeIp": {"type": "string", "format": "ipv4", "description": "IPv4 (or IPv4-mapped IPv6)"},
                "nodeVersion": {"type": "string", "minLength": 1, "description": trimmed},
                "preflight": n({"type": "boolean"}),
                "inventory": n({"$ref": "#/components/schemas/SylveInventoryReport"}),
            },
        },
        "SylveResponse": {
            "type": "object",
            "description": "Sylve's `internal.APIResponse`: `message` is the outcome a node switches on "
            "(`node_added_to_cluster`, `cluster_join_preflight_passed`, `invalid_cluster_key`, ...), "
            "`error` the detail.",
            "required": ["status", "message", "error", "data"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "enum": ["success", "error"]},
                "message": {"type": "string"},
                "error": {"type": "string"},
                "data": {
                    "description": "On success the (merged, for a preflight) inventory report; else null"
                },
            },
        },
    }


def operation(route: Route) -> Schema:
    """The accept-join, in the words of its row of the route table (each path has its own)."""
    envelope = content("#/components/schemas/SylveResponse")
    answers = {
        "200": "`node_added_to_cluster` (the submitted inventory echoed) or `cluster_join_preflight_passed`",
        "400": "`invalid_request_payload`, `cluster_join_failed`",
        "401": "`invalid_cluster_key`: no, empty or several `X-Cluster-Key`, or an unknown one",
        "403": "`cluster_token_forbidden`: `X-Cluster-Token` or `Authorization` was sent",
        "409": "`cluster_version_mismatch`, `guest_identity_join_preflight_failed`",
        "413": f"`request_body_too_large`: a body over {sylve_wire.MAX_BODY_BYTES} bytes",
        "500": "`internal_error`",
        "503": "`guest_identity_inventory_unavailable`: retry (`Retry-After` when out of time)",
    }
    responses: Schema = {code: {"description": text, "content": envelope} for code, text in answers.items()}
    responses["503"]["headers"] = RETRY_AFTER
    return {
        "post": {
            "tags": [TAGS["cluster"][0]],
            "summary": route.summary,
            "description": route.description,
            "requestBody": {
                "required": True,
                "content": {
                    JSON: {
                        "schema": {"$ref": "#/components/schemas/SylveAcceptJoinRequest"},
                        "example": copy.deepcopy(route.example),
                    }
                },
            },
            "responses": responses,
        }
    }
