"""`make bench`, part three: the approval queue across pools (joinRequests/list without a poolId).

The tenant grows from 10 to 200 pools (in 5 sites), each holding 20 pending requests and 20 decided
ones. For each size: Queries and items DynamoDB read for one page of 100 pending requests, for a
key that reads every pool and for a key of one pool. Latency is not reported: the emulator's index
query walks every item, which DynamoDB's does not.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from typing import Any

from joinplane import aws, clock, container, ids, join_requests, pools
from joinplane.dal import dynamo
from joinplane.dal.requests import list_partition
from joinplane.grants import Grant, Principal
from joinplane.settings import settings
from joinplane_local import emulator
from joinplane_local.template import Names, Template, create_resources, load

SIZES = (10, 50, 200)
SITES = 5
PENDING, DECIDED = 20, 20


def request_item(pool_id: str, site_id: str, state: str) -> dict[str, Any]:
    request_id = ids.new_id("jreq")
    expires = int(clock.epoch()) + 86_400
    return {
        "pk": f"JREQ#{request_id}",
        "sk": "JREQ",
        "requestId": request_id,
        "tenantId": "acme",
        "siteId": site_id,
        "poolId": pool_id,
        "tokenId": "jtok_bench",
        "identity": "bench",
        "state": state,
        "reasons": [],
        "machine": {},
        "createdAt": clock.rfc3339(clock.now()),
        "expiresAt": clock.rfc3339(expires),
        "expiresAtEpoch": expires,
        "gsi1pk": list_partition("acme", site_id, pool_id, state),
        "gsi1sk": request_id,
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
    narrow = Principal("key_narrow", "acme", (Grant.parse("compute:join-tokens:read@compute-pool/p0001"),))
    calls: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        calls["Query"] += 1

    def scanned(parsed: dict[str, Any], **_: Any) -> None:
        calls["items"] += int(parsed.get("ScannedCount", 0))

    client = aws.client("dynamodb")
    client.meta.events.register("before-call.dynamodb.Query", count)
    client.meta.events.register("after-call.dynamodb.Query", scanned)
    print("The queue across pools, one page of joinRequests/list (no poolId, limit 100, pending):\n")
    print("| pools the key reads | Queries per page | items read per page | a key of one pool: Queries |")
    print("|---:|---:|---:|---:|")
    made = 0
    for size in SIZES:
        for n in range(made, size):
            pool_id, site_id = f"p{n:04d}", f"site-{n % SITES}"
            pools.create(
                admin,
                pools.CreatePool(tenantId="acme", poolId=pool_id, siteId=site_id, name="p", workspaceId="w"),
            )
            write(
                [request_item(pool_id, site_id, "pending") for _ in range(PENDING)]
                + [request_item(pool_id, site_id, ("rejected", "consumed")[i % 2]) for i in range(DECIDED)]
            )
        made = size
        calls.clear()
        page = join_requests.list_requests(admin, join_requests.ListJoinRequests(tenantId="acme", limit=100))
        assert len(page["requests"]) == 100
        wide = dict(calls)
        calls.clear()
        join_requests.list_requests(narrow, join_requests.ListJoinRequests(tenantId="acme", limit=100))
        print(f"| {size} | {wide['Query']} | {wide['items']:,} | {calls['Query']} |")
    running.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
