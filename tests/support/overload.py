"""A crowd of machines joining one pool at the same moment over HTTP, as `make bench` and the
overload tests send it: each its own key and CSR, all released together against a running local
runtime, each with or without the CLI's retries (`joinplane_cli.api.Retry`)."""

from __future__ import annotations

import http.client
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from joinplane_cli import api
from joinplane_cli.keys import MachineKey

from .races import release_together


@dataclass
class Burst:
    # One entry per machine: its final HTTP status, and the refusal's reason when it has one.
    statuses: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    # Connections that ended without an HTTP answer (reset, closed), by exception name.
    dropped: list[str] = field(default_factory=list)

    def count(self, status: int) -> int:
        return self.statuses.count(status)

    def summary(self) -> dict[str, Any]:
        return {
            "statuses": dict(sorted(Counter(self.statuses).items())),
            "reasons": dict(sorted(Counter(r for r in self.reasons if r).items())),
            "dropped": len(self.dropped),
        }


def new_token(url: str, admin_key: str, pool: str, max_uses: int) -> str:
    client = api.Client(url, api_key=admin_key)
    body = {"tenantId": "dev", "poolId": pool, "maxUses": max_uses, "ttlSeconds": 3600}
    return str(client.post("/api/compute/joinTokens/create", body).body["token"])


def csrs(count: int) -> list[str]:
    return [MachineKey.generate().csr(f"burst-{index}") for index in range(count)]


def join_together(url: str, token: str, requests: list[str], *, retry: api.Retry | None) -> Burst:
    """Every CSR joins with `token` at once; with `retry`, through the CLI's HTTP client and its
    retries, else one raw request each (whatever the first answer is, it is the result)."""
    host, port = url.removeprefix("http://").split(":")

    def raw(index: int) -> tuple[int, str] | str:
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            payload = json.dumps({"joinToken": token, "csr": requests[index]})
            connection.request("POST", "/machines/join", payload, {"Content-Type": "application/json"})
            response = connection.getresponse()
            body = response.read()
        except (ConnectionError, http.client.HTTPException) as dropped:
            return type(dropped).__name__
        finally:
            connection.close()
        return response.status, _reason(body)

    def client(index: int) -> tuple[int, str] | str:
        try:
            answer = api.Client(url, timeout=60).post(
                "/machines/join", {"joinToken": token, "csr": requests[index]}, retry=retry
            )
        except api.ApiError as failed:
            return failed.status, failed.reason
        except api.Unreachable as down:
            return down.reason
        return answer.status, ""

    burst = Burst()
    for result in release_together(raw if retry is None else client, len(requests)):
        if isinstance(result, str):
            burst.dropped.append(result)
        else:
            burst.statuses.append(result[0])
            burst.reasons.append(result[1])
    return burst


def _reason(body: bytes) -> str:
    try:
        document = json.loads(body)
    except ValueError:
        return ""
    for detail in document.get("details", []) if isinstance(document, dict) else []:
        if isinstance(detail, dict) and isinstance(detail.get("reason"), str):
            return str(detail["reason"])
    return ""
