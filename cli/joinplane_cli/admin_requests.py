"""`joinplane requests`: the join-request queue: list, watch, get, and approve or reject one
request or several."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from joinplane_cli import admin, render
from joinplane_cli.admin import Operator
from joinplane_cli.api import ApiError
from joinplane_cli.exits import Exit
from joinplane_cli.options import described
from joinplane_cli.render import Column


def requests_list(
    op: Operator, pool: str | None, state: str, limit: int | None, cursor: str | None, every: bool
) -> Exit:
    body: dict[str, Any] = {"state": state}
    if pool:
        body["poolId"] = pool
    items, next_cursor, now = op.pages(
        "joinRequests/list",
        body,
        "requests",
        "join request",
        limit=limit,
        cursor=cursor,
        every=every,
    )
    return requests_table(op, pool, state, items, next_cursor, now)


def requests_table(
    op: Operator,
    pool: str | None,
    state: str,
    items: list[dict[str, Any]],
    next_cursor: str | None,
    now: float,
) -> Exit:
    columns: list[Column] = [
        ("request", lambda r: r.get("requestId")),
        ("state", lambda r: r.get("state")),
    ]
    if not pool:
        # Every pool the key sees: a site's unclaimed request belongs to no pool yet.
        columns.append(("pool", lambda r: r.get("poolId") or f"site {r.get('siteId')}"))
    columns += [
        ("host", lambda r: admin.as_object(r.get("machine")).get("hostname")),
        ("resources", lambda r: admin.machine_line(admin.as_object(r.get("machine")))),
        (
            "deferred because",
            lambda r: [admin.as_object(x).get("code") for x in admin.as_list(r.get("reasons"))],
        ),
        ("asked", lambda r: render.since(r.get("createdAt"), now)),
        ("expires", lambda r: render.expiry(r.get("state"), r.get("expiresAt"), now)),
    ]
    if any(approvals_line(r) for r in items):
        columns.append(("approvals", approvals_line))
    if any(r.get("reason") for r in items):
        columns.append(("reason", lambda r: r.get("reason")))
    where = "" if state == "all" else f"{state} "
    scope = f"for pool {pool}" if pool else "in the pools this key can see"
    return op.listing(items, next_cursor, "requests", columns, f"No {where}join requests {scope}.")


def approvals_line(item: dict[str, Any]) -> str | None:
    """ "1 of 2 approvals (by key_...)": where a request stands when its pool needs more than one
    approval (None when it needs one and has at most one: nothing to say beyond its state)."""
    approvals = [admin.as_object(a) for a in admin.as_list(item.get("approvals"))]
    required = admin.as_number(item.get("approvalsRequired"))
    if len(approvals) <= 1 and (required is None or required <= 1):
        return None
    count = f"{len(approvals)} of {required:g}" if required is not None else str(len(approvals))
    by = ", ".join(str(a.get("by")) for a in approvals)
    return f"{count} approvals" + (f" (by {by})" if by else "")


def _request_line(r: dict[str, Any]) -> str:
    machine = admin.as_object(r.get("machine"))
    where = r.get("poolId") or f"site {r.get('siteId')}"
    why = render.cell([admin.as_object(x).get("code") for x in admin.as_list(r.get("reasons"))])
    host = render.cell(machine.get("hostname"))
    request, state = render.cell(r.get("requestId")), render.cell(r.get("state"))
    return f"{request} {state} in {render.cell(where)} from {host} ({why})"


def requests_watch(
    op: Operator,
    pool: str | None,
    state: str,
    interval: float,
    *,
    sleep: Callable[[float], object] = time.sleep,
    rounds: int | None = None,
) -> Exit:
    """The queue, then each change to it as it happens, until Ctrl-C (or SIGTERM): a request that
    arrives, one whose state changes, one that leaves the listing (decided, expired, consumed),
    said with what became of it. The queue is read whole every `interval` (every page): a watch is
    a person's view of a queue, not a feed to build on (that is what the security events are).
    With -o json, one object per line: `{"type": "ADDED"|"MODIFIED"|"REMOVED", "request": {...}}`,
    as a Kubernetes watch says it."""
    body: dict[str, Any] = {"state": state}
    if pool:
        body["poolId"] = pool
    known: dict[str, dict[str, Any]] | None = None
    done = 0
    while rounds is None or done < rounds:
        items, _cursor, now = op.pages(
            "joinRequests/list", body, "requests", "join request", limit=None, cursor=None, every=True
        )
        current = {str(r.get("requestId")): r for r in items}
        if known is None:
            if op.json:
                for item in items:
                    _watch_event(op, "ADDED", item, now)
            else:
                requests_table(op, pool, state, items, None, now)
                every = f"{interval:g}s" if interval < 60 else render.duration(interval)
                print(f"(watching every {every}; Ctrl-C to stop)", file=op.err)
                op.out.flush()
        else:
            for request_id, item in current.items():
                before = known.get(request_id)
                if before is None:
                    _watch_event(op, "ADDED", item, now)
                elif before.get("state") != item.get("state") or before.get("poolId") != item.get("poolId"):
                    _watch_event(op, "MODIFIED", item, now)
            for request_id, item in known.items():
                if request_id not in current:
                    _watch_event(op, "REMOVED", _now_of(op, item), now)
        known = current
        done += 1
        if rounds is None or done < rounds:
            sleep(interval)
    return Exit.OK


def _now_of(op: Operator, item: dict[str, Any]) -> dict[str, Any]:
    """What became of a request that left the listing (decided, expired...), or as last seen when
    the server no longer shows it."""
    try:
        found, _ = op.call("joinRequests/get", {"requestId": item.get("requestId")})
    except ApiError:
        return item
    return found if found.get("requestId") == item.get("requestId") else item


def _watch_event(op: Operator, kind: str, item: dict[str, Any], now: float) -> None:
    if op.json:
        render.print_json_line({"type": kind, "request": item}, op.out)
    else:
        words = {"ADDED": "new", "MODIFIED": "now", "REMOVED": "left the list"}[kind]
        print(f"{render.rfc3339(now)}  {words}: {_request_line(item)}", file=op.out, flush=True)


def _request_pairs(item: dict[str, Any], now: float) -> list[tuple[str, Any]]:
    machine = admin.as_object(item.get("machine"))
    return [
        ("state", item.get("state")),
        (
            "pool",
            item.get("poolId") or (f"site {item['siteId']} (unclaimed)" if item.get("siteId") else None),
        ),
        ("host", machine.get("hostname")),
        ("resources", admin.machine_line(machine)),
        ("approvals", approvals_line(item)),
        ("reason", item.get("reason")),
        ("expires", admin.expiry(item.get("state"), item.get("expiresAt"), now)),
    ]


def requests_get(op: Operator, pool: str | None, request_id: str) -> Exit:
    body: dict[str, Any] = {"requestId": request_id}
    if pool:
        body["poolId"] = pool
    item, now = op.call("joinRequests/get", body)
    pairs = _request_pairs(item, now)
    # One request, read by a person deciding it: each reason with its words (why a TPM was not
    # trusted, which manufacturer did not issue it), not only its code as the queue's table has.
    reasons = [admin.as_object(x) for x in admin.as_list(item.get("reasons"))]
    pairs[4:4] = [
        (
            "deferred because",
            [f"{r.get('code')} ({r['message']})" if r.get("message") else r.get("code") for r in reasons],
        ),
        ("asked", f"{item.get('createdAt')} ({render.since(item.get('createdAt'), now)})"),
    ]
    return op.show(item, f"Join request {request_id}:", pairs)


def _decide(
    op: Operator, verb: str, pool: str | None, request_id: str, reason: str | None, ttl: int | None
) -> tuple[dict[str, Any], str, float]:
    body: dict[str, Any] = {"requestId": request_id}
    if pool:
        body["poolId"] = pool
    if reason:
        body["reason"] = reason
    if ttl is not None:
        body["ttlSeconds"] = ttl
    item, now = op.call(f"joinRequests/{verb}", body)
    if verb == "approve" and item.get("state") == "pending":
        # One approval of several: the machine still waits, and the operator should know for what.
        headline = (
            f"Recorded this key's approval of {request_id}: {approvals_line(item)}; "
            "the machine waits for the rest."
        )
    elif verb == "approve":
        headline = (
            f"Approved {request_id}: the machine is admitted on its next retry "
            f"(the approval lapses {render.until(item.get('expiresAt'), now)})."
        )
    else:
        headline = f"Rejected {request_id}: the machine's retries now fail."
    return item, headline, now


def requests_decide(
    op: Operator, verb: str, pool: str | None, request_id: str, reason: str | None, ttl: int | None
) -> Exit:
    item, headline, now = _decide(op, verb, pool, request_id, reason, ttl)
    return op.show(item, headline, _request_pairs(item, now))


def requests_decide_each(
    op: Operator,
    verb: str,
    pool: str | None,
    request_ids: Sequence[str],
    reason: str | None,
    ttl: int | None,
) -> Exit:
    """Several requests decided in turn, each on its own: one refused (already decided, not found)
    is said and the others are still decided; the exit is the first refusal's. A server that cannot
    be reached ends it at once (the rest would fail the same way)."""
    if len(request_ids) == 1:
        return requests_decide(op, verb, pool, request_ids[0], reason, ttl)
    decided: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    exit_code = Exit.OK
    for request_id in dict.fromkeys(request_ids):  # the same id twice is decided once
        try:
            item, headline, _now = _decide(op, verb, pool, request_id, reason, ttl)
        except ApiError as failed:
            for line in described(failed):
                print(f"joinplane: {request_id}: {line}", file=op.err)
            refused.append({"requestId": request_id, "code": failed.code, "message": failed.server_message})
            exit_code = exit_code or failed.exit_code
            continue
        decided.append(item)
        if not op.json:
            machine = admin.as_object(item.get("machine"))
            where = f" ({machine.get('hostname') or '?'} in {item.get('poolId') or '?'})"
            print(headline.replace(":", where + ":", 1), file=op.out)
    if op.json:
        render.print_json({"requests": decided, "refused": refused}, op.out)
    return exit_code
