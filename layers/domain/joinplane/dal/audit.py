"""The audit trail in the table: `AUDIT#<tenantId>` / `<occurredAt>#<rank>#<eventId>`, and through
gsi1 per pool (`AUDIT#<tenantId>#POOL#<poolId>`, same sort key). The sort key is deterministic for
an event (its id and its occurredAt both derive from the transition), so a redelivered event meets
its own item and the conditional put refuses it: the consumer is idempotent on `eventId` with no
extra table or read. The sort key is also the listing's cursor (`cursor`, the one place it is made).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item

# Timestamps are whole seconds, and one transaction can make two events (a request consumed and
# its machine joined). Within one second, events sort in causal order by this rank: what operators
# set up (pools, tokens, keys, inventories) before the joins it enables, its undoing after.
RANK = {
    "security.pool.created": 0,
    "security.pool.updated": 0,
    "security.join-token.created": 0,
    "security.api-key.created": 0,
    "security.cluster-key.rotated": 0,
    "security.discovery-entry.registered": 0,
    "security.tpm-key.allowed": 0,
    "security.join-request.created": 1,
    # A partial approval shares the decisions' rank: within one second it may sort after the approval
    # that completed the count (by eventId); each event's `approvals` says the order.
    "security.join-request.approval-recorded": 2,
    "security.join-request.approved": 2,
    "security.join-request.rejected": 2,
    "security.join-request.consumed": 3,
    "security.machine.joined": 4,
    "security.machine.key-rotated": 4,
    "security.join-request.expired": 5,
    "security.machine.revoked": 6,
    "security.cluster.node-joined": 4,
    "security.join-token.revoked": 7,
    "security.api-key.revoked": 7,
    "security.discovery-entry.removed": 7,
    "security.tpm-key.removed": 7,
    "security.pool.archived": 8,
}
_UNRANKED = 9
# A detailType filter is applied by DynamoDB after reading: at most this many reads fill a page.
_FILTERED_READS = 5


class AuditEventRecord(NamedTuple):
    event_id: str
    detail_type: str
    occurred_at: str
    tenant_id: str
    site_id: str | None
    pool_id: str | None
    detail: dict[str, Any]
    ttl: int | None = None

    @property
    def cursor(self) -> str:
        """The event's sort key, which is also where a listing resumes after it."""
        return f"{self.occurred_at}#{RANK.get(self.detail_type, _UNRANKED)}#{self.event_id}"

    @classmethod
    def from_item(cls, item: Item) -> AuditEventRecord:
        return cls(
            event_id=item["eventId"],
            detail_type=item["detailType"],
            occurred_at=item["occurredAt"],
            tenant_id=item["tenantId"],
            site_id=item.get("siteId"),
            pool_id=item.get("poolId"),
            detail=item["detail"],
            ttl=item.get("ttl"),
        )

    def to_item(self) -> Item:
        return {
            "pk": f"AUDIT#{self.tenant_id}",
            "sk": self.cursor,
            "gsi1pk": _pool_pk(self.tenant_id, self.pool_id) if self.pool_id else None,
            "gsi1sk": self.cursor if self.pool_id else None,
            "eventId": self.event_id,
            "detailType": self.detail_type,
            "occurredAt": self.occurred_at,
            "tenantId": self.tenant_id,
            "siteId": self.site_id,
            "poolId": self.pool_id,
            "detail": self.detail,
            "ttl": self.ttl,
        }


def _pool_pk(tenant_id: str, pool_id: str) -> str:
    return f"AUDIT#{tenant_id}#POOL#{pool_id}"


def record(event: AuditEventRecord) -> bool:
    """Store the event; False when it was stored already (a redelivery)."""
    try:
        dynamo.put(event.to_item(), condition="attribute_not_exists(pk)")
    except dynamo.ConditionFailed:
        return False
    return True


class AuditPage(NamedTuple):
    events: list[AuditEventRecord]
    more: bool  # events may follow the last one


def list_events(
    tenant_id: str, *, pool_id: str | None, detail_type: str | None, before: str | None, limit: int
) -> AuditPage:
    """Up to `limit` events newest first, of the tenant or of one pool, optionally of one detail
    type, older than the cursor `before`."""
    if pool_id is not None:
        pk, index = _pool_pk(tenant_id, pool_id), "gsi1"
    else:
        pk, index = f"AUDIT#{tenant_id}", None
    events: list[AuditEventRecord] = []
    last_key: Item | None = None
    for _ in range(_FILTERED_READS):
        page = dynamo.query(
            pk=pk,
            index=index,
            ascending=False,
            limit=limit,
            sk_below=before if last_key is None else None,
            start_after=last_key,
            filter="detailType = :type" if detail_type else None,
            filter_values={":type": detail_type} if detail_type else None,
        )
        events += [AuditEventRecord.from_item(item) for item in page.items]
        last_key = page.last_key
        if last_key is None or len(events) >= limit:
            break
    return AuditPage(events[:limit], last_key is not None or len(events) >= limit)
