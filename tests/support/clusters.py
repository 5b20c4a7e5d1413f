"""Clusters as a Sylve node meets them: POST /cluster/accept-join delivered as API Gateway would, a
pool made a cluster, the inventory report a node submits, and the claims the table then holds."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from joinplane.clusters import inventory

from .functions import load_function
from .http import Reply, call
from .lambda_context import LambdaContext, http_event
from .table import all_items

PATH = "/cluster/accept-join"


@dataclass
class Answer(Reply):
    """A reply with its response headers."""

    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Remaining:
    """A Lambda context whose invocation has `seconds` left from when it is made."""

    seconds: float

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


TENANT, POOL = "acme", "sylve"


def post(
    body: Any = None,
    key: str | None = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    path: str = PATH,
    context: Any = None,
) -> Answer:
    """The endpoint as API Gateway delivers it: no authorizer, headers lower-cased and joined.
    `context` is the Lambda context (default: one with 10 s left)."""
    sent = {"x-cluster-key": key} if key is not None else {}
    sent.update(headers or {})
    payload = raw if raw is not None else json.dumps(body).encode()
    event = http_event(path, payload, sent)
    result = load_function("cluster_join").lambda_handler(event, context or LambdaContext())
    return Answer(result["statusCode"], json.loads(result["body"]), result.get("headers") or {})


def make_cluster(admin_key: str, pool_id: str = POOL, *, required: str | None = None) -> str:
    """A pool of tenant acme made a cluster: returns its cluster key."""
    created = call(
        "/api/compute/pools/create",
        {
            "tenantId": TENANT,
            "poolId": pool_id,
            "siteId": "dc-1",
            "name": "Sylve pool",
            "workspaceId": "ws",
            **({"cluster": {"requiredNodeVersion": required}} if required else {}),
        },
        admin_key,
    )
    assert created.status == 200, created.body
    rotated = call("/api/compute/clusters/rotateKey", {"tenantId": TENANT, "poolId": pool_id}, admin_key)
    assert rotated.status == 200, rotated.body
    return str(rotated.body["clusterKey"])


def entries(node_id: str, ids: Iterable[int], guest_type: str = "vm") -> list[dict[str, Any]]:
    return [
        {"nodeId": node_id, "guestType": guest_type, "guestId": i, "recordId": i, "name": f"{guest_type}-{i}"}
        for i in ids
    ]


def report(items: list[dict[str, Any]]) -> dict[str, Any]:
    """What a Sylve node submits: its own canonical report."""
    built = inventory.build_report(items)
    return {"entries": [e.model_dump() for e in built.entries], "conflicts": [], "digest": built.digest}


def join_body(
    node_id: str,
    ip: str,
    ids: Iterable[int] = (),
    *,
    preflight: bool = False,
    version: str = "1.0.0",
    items: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "nodeId": node_id,
        "nodeIp": ip,
        "nodeVersion": version,
        "preflight": preflight,
        "inventory": report(items if items is not None else entries(node_id, ids)),
    }


def registry() -> list[tuple[int, str, str]]:
    """(guestId, nodeId, guestType) of every claim, read straight from the guest items."""
    claims = []
    for item in all_items():
        if item["sk"].startswith("GUESTS#"):
            for claim in item["claims"].split(","):
                guest_id, code, index = claim.split(":")
                claims.append((int(guest_id), item["nodes"][int(index)], {"v": "vm", "j": "jail"}[code]))
    return sorted(claims)


def cluster_nodes() -> list[dict[str, Any]]:
    return sorted((i for i in all_items() if i["pk"].startswith("CLUSTERNODE#")), key=lambda i: i["nodeId"])
