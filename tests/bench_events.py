"""`make bench`, part three: how long an approval made over HTTP takes to show up in
auditEvents/list, through the whole local chain (table stream → publisher → EventBridge (moto) →
rule → audit consumer). Median of several approvals; the tests use a wider deadline because CI
machines are shared."""

from __future__ import annotations

import io
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from joinplane_local.runtime import start_runtime
from tests.support import openssl_csr

ROUNDS = 7


def main() -> int:
    runtime = start_runtime(port=0, log=io.StringIO())
    key = runtime.admin_key

    def post(path: str, body: Any, auth: bool = True) -> Any:
        headers = {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if auth else {})}
        request = urllib.request.Request(
            runtime.url + path, json.dumps(body).encode(), headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    latencies = []
    try:
        for _ in range(ROUNDS):
            token = post(
                "/api/compute/joinTokens/create",
                {"tenantId": "dev", "poolId": "dev-pool", "requireApproval": True},
            )["token"]
            csr = openssl_csr(Path(tempfile.mkdtemp()), "/CN=bench")
            request_id = post("/machines/join", {"joinToken": token, "csr": csr}, auth=False)["joinRequest"][
                "requestId"
            ]
            time.sleep(0.5)  # let the creation event settle, so only the approval is timed
            started = time.monotonic()
            post(
                "/api/compute/joinRequests/approve",
                {"tenantId": "dev", "poolId": "dev-pool", "requestId": request_id},
            )
            while time.monotonic() - started < 10:
                events = post(
                    "/api/compute/auditEvents/list",
                    {"tenantId": "dev", "poolId": "dev-pool", "detailType": "security.join-request.approved"},
                )
                if any(e["detail"]["requestId"] == request_id for e in events["events"]):
                    latencies.append(time.monotonic() - started)
                    break
                time.sleep(0.02)
    finally:
        runtime.stop()
    print(f"\nApproval over HTTP → visible in auditEvents/list, local runtime, {len(latencies)} approvals:")
    print(f"  median {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
