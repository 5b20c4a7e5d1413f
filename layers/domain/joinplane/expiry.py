"""The retention job: mark join requests past their expiry `expired`, and let retired pool CAs
whose certificates have all expired leave their pool's bundle (their KMS keys scheduled for deletion).

Apart from joinplane.join_requests, whose operator models (pydantic) the scheduled function has no
use for: without them its cold start is a third shorter (make bench).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from joinplane import aws, clock, observe
from joinplane.dal import authorities as authorities_db
from joinplane.dal import ca_retention
from joinplane.dal import requests as requests_db


def expire_due(max_items: int = 1000) -> int:
    """Mark open requests past their expiry `expired` (the retention job). Correctness never
    waits for this: such requests already read as expired. Marking them makes the transition a
    stored fact, so the stream publishes `security.join-request.expired` and the listing partitions
    stay tidy. Reads only the sparse open-requests index up to now; one conditional write each, so
    a request decided or consumed meanwhile is left alone."""
    now = clock.now()
    marked = 0
    for shard in range(requests_db.OPEN_SHARDS):
        start: dict[str, Any] | None = None
        while marked < max_items:
            page = requests_db.open_due(shard, now=now, limit=min(100, max_items - marked), start=start)
            for due in page.requests:
                # Not marked: decided, consumed or already marked since the index was read.
                if requests_db.mark_expired(due, now=now):
                    marked += 1
                    observe.decision(
                        "join request expired",
                        "RequestDecisions",
                        "expired",
                        tenantId=due.tenant_id,
                        poolId=due.pool_id,
                        requestId=due.request_id,
                    )
            if page.next is None:
                break
            start = page.next
    return marked


def expire_retired_authorities(max_items: int = 100) -> int:
    """Retired CAs past their bundleUntil (see docs/pki.md: no certificate they issued is still
    valid) leave the bundle: their keys are scheduled for deletion first, then one transaction
    marks the CA `expired` and drops it from the pool's bundle at the pointer's version. A run that
    stops between the two is redone by the next (the key is already pending deletion: fine)."""
    now = clock.now()
    expired = 0
    start: dict[str, Any] | None = None
    while expired < max_items:
        page = ca_retention.retired_due(now, limit=min(100, max_items - expired), start=start)
        for due in page.authorities:
            pointer = authorities_db.get_pointer(due.tenant_id, due.pool_id)
            if pointer is None or due.bundle_until is None or due.bundle_until > clock.seconds(now):
                continue
            _schedule_key_deletion(due.key_id)
            try:
                ca_retention.expire(pointer, due, now)
            except authorities_db.Contended:
                continue  # changed meanwhile (a rotation, another run): the next run looks again
            expired += 1
            observe.log(
                "INFO",
                "certificate authority expired",
                tenantId=due.tenant_id,
                poolId=due.pool_id,
                caId=due.ca_id,
            )
        if page.next is None:
            break
        start = page.next
    return expired


# A key is recorded as abandoned after the write that would have used it failed, or while one whose
# outcome is unknown (a timeout) may still land: the job waits past any function's timeout before it
# reads the key's CA, so a CA that did get stored is seen and its key kept.
ABANDONED_KEY_GRACE_SECONDS = 300


def delete_abandoned_keys(max_items: int = 100) -> int:
    """Keys the functions recorded as abandoned (joinplane.ca) are scheduled for deletion, each only
    if its tags say this stack made it and name a CA that is not stored or was abandoned: a record
    is a request, never trusted, so a forged one cannot delete a key in use. Each record is dropped
    once decided."""
    from joinplane.settings import settings

    stack = settings().kms_stack_tag
    before = clock.now() - timedelta(seconds=ABANDONED_KEY_GRACE_SECONDS)
    deleted = 0
    start: dict[str, Any] | None = None
    while deleted < max_items:
        page = ca_retention.abandoned_keys(before=before, limit=min(100, max_items - deleted), start=start)
        for key_id in page.key_ids:
            if _unused(key_id, stack):
                _schedule_key_deletion(key_id)
                deleted += 1
                observe.log("INFO", "an abandoned CA key was scheduled for deletion", keyId=key_id)
            ca_retention.forget_abandoned_key(key_id)
        if page.next is None:
            break
        start = page.next
    return deleted


def _unused(key_id: str, stack: str) -> bool:
    from botocore.exceptions import ClientError

    client = aws.client("kms")
    try:
        tags = {t["TagKey"]: t["TagValue"] for t in client.list_resource_tags(KeyId=key_id).get("Tags", [])}
    except client.exceptions.NotFoundException:
        return False  # nothing to delete
    except ClientError as failure:
        if failure.response.get("Error", {}).get("Code") != "AccessDeniedException":
            raise
        tags = {}  # IAM lets the job read only this stack's keys
    ca_id = tags.get("joinplane:ca")
    if tags.get("joinplane:stack") != stack or not ca_id:
        observe.log("WARNING", "a key recorded as abandoned is not this stack's CA key: kept", keyId=key_id)
        return False
    ca = authorities_db.get(ca_id)
    if ca is not None and ca.state != "abandoned":
        observe.log(
            "WARNING", "a key recorded as abandoned belongs to a stored CA: kept", keyId=key_id, caId=ca_id
        )
        return False
    return True


def _schedule_key_deletion(key_id: str) -> None:
    client = aws.client("kms")
    # Already pending deletion: a run before this one scheduled it.
    with contextlib.suppress(client.exceptions.KMSInvalidStateException):
        client.schedule_key_deletion(KeyId=key_id, PendingWindowInDays=authorities_db.KEY_DELETION_DAYS)
