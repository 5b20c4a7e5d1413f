"""`make bench`, part two: the approval queue's listing cost as the table grows.

The pool under test always holds 150 pending requests (so a page of 100 is full). Around it the
table grows from 1,000 to 100,000 join requests in other pools and in other states of this pool.
For each size: Queries per page, items DynamoDB read for the page, and the median latency of a
page against the embedded moto server (latency is the emulator's, reported only for its trend).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections import Counter
from typing import Any

from joinplane import aws, clock, container, ids, join_requests, pools
from joinplane.dal import dynamo
from joinplane.dal.requests import list_partition, queue_index
from joinplane.grants import Grant, Principal
from joinplane.settings import settings
from joinplane_local import emulator
from joinplane_local.template import Names, Template, create_resources, load

SIZES = (1_000, 10_000, 100_000)
OURS = 150
STATES = ("approved", "rejected", "consumed", "expired")


def request_item(pool_id: str, state: str, site: str = "site-1") -> dict[str, Any]:
    request_id = ids.new_id("jreq")
    expires = int(clock.epoch()) + 86_400
    return {
        "pk": f"JREQ#{request_id}",
        "sk": "JREQ",
        "requestId": request_id,
        "tenantId": "acme",
        "tokenId": "jtok_bench",
        "identity": "bench",
        "siteId": site,
        "poolId": pool_id,
        "state": state,
        "reasons": [],
        "machine": {},
        "createdAt": clock.rfc3339(clock.now()),
        "expiresAt": clock.rfc3339(expires),
        "expiresAtEpoch": expires,
        "gsi1pk": list_partition("acme", site, pool_id, state),
        "gsi1sk": request_id,
        **(queue_index("acme", request_id) if state == "pending" else {}),
    }


def write(items: list[dict[str, Any]]) -> None:
    client = aws.client("dynamodb")
    for start in range(0, len(items), 25):
        batch = [{"PutRequest": {"Item": dynamo.serialize(i)}} for i in items[start : start + 25]]
        while batch:
            response = client.batch_write_item(RequestItems={settings().table_name: batch})
            batch = response.get("UnprocessedItems", {}).get(settings().table_name, [])


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
    pools.create(
        admin, pools.CreatePool(tenantId="acme", poolId="ours", siteId="site-1", name="ours", workspaceId="w")
    )
    write([request_item("ours", "pending") for _ in range(OURS)])
    calls: Counter[str] = Counter()
    read_items = {"n": 0}

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    def scanned(parsed: dict[str, Any], **_: Any) -> None:
        read_items["n"] += int(parsed.get("ScannedCount", 0))

    client = aws.client("dynamodb")
    print("Approval queue, one page of joinRequests/list (limit 100, state pending), as the table grows:\n")
    print("| requests in the table | Queries per page | items read per page | median page latency (ms) |")
    print("|---:|---:|---:|---:|")
    written = OURS
    rows = []
    for size in SIZES:
        others = []
        for n in range(size - written):
            if n % 3 == 0:
                others.append(request_item("ours", STATES[n % len(STATES)]))
            else:
                others.append(
                    request_item(f"pool-{n % 50}", ("pending", *STATES)[n % 5], site=f"site-{n % 7}")
                )
        write(others)
        written = size
        request = join_requests.ListJoinRequests(tenantId="acme", poolId="ours", limit=100)
        timings = []
        client.meta.events.register("before-call.dynamodb.Query", count)
        client.meta.events.register("after-call.dynamodb.Query", scanned)
        for _ in range(7):
            calls.clear()
            read_items["n"] = 0
            started = time.perf_counter()
            page = join_requests.list_requests(admin, request)
            timings.append((time.perf_counter() - started) * 1000)
            assert len(page["requests"]) == 100
        client.meta.events.unregister("before-call.dynamodb.Query", count)
        client.meta.events.unregister("after-call.dynamodb.Query", scanned)
        rows.append((size, calls["Query"], read_items["n"], statistics.median(timings)))
        print(f"| {size:,} | {calls['Query']} | {read_items['n']} | {statistics.median(timings):.1f} |")
    flat = len({(q, n) for _, q, n, _ in rows}) == 1
    print(
        f"\nQueries and items read per page are {'the same at every size' if flat else 'NOT flat'}. "
        "The latency is moto's: its index query walks every item, which DynamoDB's does not."
    )
    running.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
