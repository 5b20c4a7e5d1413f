"""A pool's recent joins as stored, newest first, for the policy simulation: its join requests, its
machines, the requests some of them were approved from, and the tokens they came with.

Every read is bounded by the caller's `limit`, never by the pool's history: the request and machine
listings (gsi1, sorted by ULIDs, so by creation) are read backwards and stopped at the limit, and
the rest are BatchGetItems of the ids those listings name. No Scan.
"""

from __future__ import annotations

from collections.abc import Iterable

from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item
from joinplane.dal.machines import MachineRecord, pool_partition
from joinplane.dal.requests import JoinRequestRecord, list_partition, request_key
from joinplane.dal.tokens import JoinTokenRecord, token_key

STORED_STATES = ("pending", "approved", "rejected", "expired", "consumed")


def _newest(partition: str, limit: int) -> list[Item]:
    found: list[Item] = []
    start: Item | None = None
    while len(found) < limit:
        page = dynamo.query(
            pk=partition, index="gsi1", ascending=False, limit=limit - len(found), start_after=start
        )
        found += page.items
        if page.last_key is None:
            break
        start = page.last_key
    return found


def requests_of_pool(tenant_id: str, site_id: str, pool_id: str, *, limit: int) -> list[JoinRequestRecord]:
    """The pool's `limit` newest requests, whatever their state (requestIds are ULIDs: their order
    is their creation's). One Query per stored state, each newest first and stopped at `limit`."""
    found = [
        JoinRequestRecord.from_item(item)
        for state in STORED_STATES
        for item in _newest(list_partition(tenant_id, site_id, pool_id, state), limit)
    ]
    found.sort(key=lambda request: request.request_id, reverse=True)
    return found[:limit]


def machines_of_pool(tenant_id: str, pool_id: str, *, limit: int) -> list[MachineRecord]:
    """The pool's `limit` most recently admitted machines, active or revoked (machineIds are ULIDs
    minted at admission)."""
    return [MachineRecord.from_item(item) for item in _newest(pool_partition(tenant_id, pool_id), limit)]


def _by_keys(keys: list[tuple[str, str]]) -> list[Item]:
    found: list[Item] = []
    for start in range(0, len(keys), 100):
        found += dynamo.batch_get(keys[start : start + 100]).values()
    return found


def requests_by_id(request_ids: Iterable[str]) -> dict[str, JoinRequestRecord]:
    """The stored requests of these ids, by id (absent ones left out), in BatchGetItems of 100."""
    found = (
        JoinRequestRecord.from_item(i) for i in _by_keys([request_key(r) for r in dict.fromkeys(request_ids)])
    )
    return {request.request_id: request for request in found}


def tokens_by_id(token_ids: Iterable[str]) -> dict[str, JoinTokenRecord]:
    """The stored join tokens of these ids, by id (absent ones left out), in BatchGetItems of 100."""
    found = (JoinTokenRecord.from_item(i) for i in _by_keys([token_key(t) for t in dict.fromkeys(token_ids)]))
    return {token.token_id: token for token in found}
