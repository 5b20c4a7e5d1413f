"""`make bench`, part three: the approval queue across pools (joinRequests/list without a poolId).

The tenant grows from 10 to 200 pools (in 5 sites), each holding 20 pending requests and 20 decided
ones. For each size: Queries and items DynamoDB read for one page of 100 pending requests, for a
key that reads every pool, for a key of one pool and for a key of one site (a fifth of the pools:
the tenant's queue is read for its share). The tenant's queue holds small index entries (owner
and expiry); the requests a page shows are then read by key, in BatchGetItem calls of up to 100.
Latency is not reported: the emulator's index query walks every item, which DynamoDB's does not.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from typing import Any

from joinplane import aws, container, join_requests, pools
from joinplane.grants import Grant, Principal
from joinplane_local import emulator
from joinplane_local.template import Names, Template, create_resources, load
from tests.bench_queue import request_item, write

SIZES = (10, 50, 200)
SITES = 5
PENDING, DECIDED = 20, 20


def main() -> int:
    emulator.use_fake_credentials()
    running = emulator.start()
    os.environ["AWS_ENDPOINT_URL"] = running.endpoint_url
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    container.reset()
    names = Names(physical={"Table": f"bench-{uuid.uuid4().hex[:8]}", "EventBus": "bench-bus"})
    create_resources(Template(load(), names), aws.client)
    os.environ["TABLE_NAME"] = names.physical["Table"]
    container.reset(keep_clients=True)
    admin = Principal("key_bench", "acme", (Grant.parse("*@platform"),))
    narrow = Principal("key_narrow", "acme", (Grant.parse("compute:join-tokens:read@compute-pool/p0001"),))
    site = Principal("key_site", "acme", (Grant.parse("compute:join-tokens:read@site/site-1"),))
    calls: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        calls["Query"] += 1

    def scanned(parsed: dict[str, Any], **_: Any) -> None:
        calls["items"] += int(parsed.get("ScannedCount", 0))

    client = aws.client("dynamodb")
    client.meta.events.register("before-call.dynamodb.Query", count)
    client.meta.events.register(
        "before-call.dynamodb.BatchGetItem", lambda **_: calls.update(["BatchGetItem"])
    )
    client.meta.events.register("after-call.dynamodb.Query", scanned)
    print("The queue across pools, one page of joinRequests/list (no poolId, limit 100, pending):\n")
    print(
        "| pools | every pool: Queries (+ BatchGetItem) per page | index entries and pools read "
        "| a key of one pool: Queries "
        "| a key of one site: Queries | items read | requests shown |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    made = 0
    for size in SIZES:
        for n in range(made, size):
            pool_id, site_id = f"p{n:04d}", f"site-{n % SITES}"
            pools.create(
                admin,
                pools.CreatePool(tenantId="acme", poolId=pool_id, siteId=site_id, name="p", workspaceId="w"),
            )
            write(
                [request_item(pool_id, "pending", site_id) for _ in range(PENDING)]
                + [request_item(pool_id, ("rejected", "consumed")[i % 2], site_id) for i in range(DECIDED)]
            )
        made = size
        calls.clear()
        page = join_requests.list_requests(admin, join_requests.ListJoinRequests(tenantId="acme", limit=100))
        assert len(page["requests"]) == 100
        wide = dict(calls)
        calls.clear()
        join_requests.list_requests(narrow, join_requests.ListJoinRequests(tenantId="acme", limit=100))
        one = dict(calls)
        calls.clear()
        shown = join_requests.list_requests(site, join_requests.ListJoinRequests(tenantId="acme", limit=100))
        print(
            f"| {size} | {wide['Query']} (+{wide.get('BatchGetItem', 0)}) | {wide['items']:,} "
            f"| {one['Query']} | {calls['Query']} "
            f"| {calls['items']:,} | {len(shown['requests'])} |"
        )
    running.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
