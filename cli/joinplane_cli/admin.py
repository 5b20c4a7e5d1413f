"""The operator's side: pools, join tokens, the join-request queue, machines and the audit trail."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from joinplane_cli import render
from joinplane_cli.api import Client
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.render import Column

API = "/api/compute"


@dataclass
class Operator:
    client: Client
    tenant: str
    output: str = "table"
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    @property
    def json(self) -> bool:
        return self.output == "json"

    def call(self, route: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        response = self.client.post(f"{API}/{route}", {"tenantId": self.tenant, **body})
        return response.body, response.now()

    def pages(
        self,
        route: str,
        body: dict[str, Any],
        key: str,
        thing: str,
        *,
        limit: int | None,
        cursor: str | None,
        every: bool,
    ) -> tuple[list[dict[str, Any]], str | None, float]:
        """One page, or every page with `every` (following `nextCursor`).

        A page must hold `key` as a list of objects: an answer without it (`{}`, an empty body, a
        proxy's page) is an error, never "No pools"."""
        items: list[dict[str, Any]] = []
        now = 0.0
        followed = {cursor} if cursor else set()
        a_list = f"{'an' if thing[0] in 'aeiou' else 'a'} {thing} list"
        while True:
            request = dict(body)
            if limit is not None:
                request["limit"] = limit
            if cursor:
                request["cursor"] = cursor
            page, now = self.call(route, request)
            found = page.get(key)
            if not isinstance(found, list) or not all(isinstance(item, dict) for item in found):
                raise CliError(f"the server's answer was not {a_list}")
            items += found
            cursor = page.get("nextCursor") or None
            if cursor is not None and not isinstance(cursor, str):
                raise CliError(f"the server's answer was not {a_list} (its nextCursor is not a string)")
            if not every or cursor is None:
                return items, cursor, now
            if cursor in followed:
                raise CliError(f"the server's {thing} list repeats itself (a nextCursor came back twice)")
            followed.add(cursor)

    def listing(
        self,
        items: list[dict[str, Any]],
        next_cursor: str | None,
        key: str,
        columns: Sequence[Column],
        empty: str,
    ) -> Exit:
        if self.json:
            document: dict[str, Any] = {key: items}
            if next_cursor:
                document["nextCursor"] = next_cursor
            render.print_json(document, self.out)
            return Exit.OK
        if items:
            render.print_table(columns, items, self.out)
        else:
            print(empty, file=self.out)
        if next_cursor:
            print(f"(more: --cursor {render.cell(next_cursor)}, or --all for every page)", file=self.err)
        return Exit.OK

    def show(self, item: dict[str, Any], headline: str, pairs: Sequence[tuple[str, Any]]) -> Exit:
        if self.json:
            render.print_json(item, self.out)
        else:
            print(headline, file=self.out)
            render.fields(pairs, self.out)
        return Exit.OK


def _object(value: Any) -> dict[str, Any]:
    """A nested object of the server's answer, or {} when it is anything else."""
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    """A finite number from the server's answer, or None when it is anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _machine_line(machine: dict[str, Any]) -> str:
    parts = [f"{machine.get('os') or '?'}/{machine.get('arch') or '?'}"]
    if machine.get("cpuCount"):
        parts.append(f"{machine['cpuCount']} CPU")
    memory = _number(machine.get("memoryMb"))
    if memory:
        parts.append(f"{memory / 1024:.0f} GiB")
    if machine.get("gpuCount"):
        parts.append(f"{machine['gpuCount']} GPU")
    return " ".join(parts)


def _duration(seconds: Any) -> str:
    number = _number(seconds)
    return render.duration(number) if number is not None else render.NONE


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _when(state: Any, expires_at: Any, now: float) -> str:
    words = render.expiry(state, expires_at, now)
    return render.NONE if words == render.NONE else f"{expires_at} ({words})"


# --- join requests -------------------------------------------------------------------------


def requests_list(
    op: Operator, pool: str, state: str, limit: int | None, cursor: str | None, every: bool
) -> Exit:
    items, next_cursor, now = op.pages(
        "joinRequests/list",
        {"poolId": pool, "state": state},
        "requests",
        "join request",
        limit=limit,
        cursor=cursor,
        every=every,
    )
    columns: list[Column] = [
        ("request", lambda r: r.get("requestId")),
        ("state", lambda r: r.get("state")),
        ("host", lambda r: _object(r.get("machine")).get("hostname")),
        ("resources", lambda r: _machine_line(_object(r.get("machine")))),
        ("deferred because", lambda r: [_object(x).get("code") for x in _list(r.get("reasons"))]),
        ("asked", lambda r: render.since(r.get("createdAt"), now)),
        ("expires", lambda r: render.expiry(r.get("state"), r.get("expiresAt"), now)),
    ]
    if any(r.get("reason") for r in items):
        columns.append(("reason", lambda r: r.get("reason")))
    where = "" if state == "all" else f"{state} "
    return op.listing(items, next_cursor, "requests", columns, f"No {where}join requests for pool {pool}.")


def requests_decide(
    op: Operator, verb: str, pool: str, request_id: str, reason: str | None, ttl: int | None
) -> Exit:
    body: dict[str, Any] = {"poolId": pool, "requestId": request_id}
    if reason:
        body["reason"] = reason
    if ttl is not None:
        body["ttlSeconds"] = ttl
    item, now = op.call(f"joinRequests/{verb}", body)
    if verb == "approve":
        headline = (
            f"Approved {request_id}: the machine is admitted on its next retry "
            f"(the approval lapses {render.until(item.get('expiresAt'), now)})."
        )
    else:
        headline = f"Rejected {request_id}: the machine's retries now fail."
    machine = _object(item.get("machine"))
    return op.show(
        item,
        headline,
        [
            ("state", item.get("state")),
            ("pool", item.get("poolId")),
            ("host", machine.get("hostname")),
            ("resources", _machine_line(machine)),
            ("reason", item.get("reason")),
            ("expires", _when(item.get("state"), item.get("expiresAt"), now)),
        ],
    )


# --- join tokens ---------------------------------------------------------------------------


def _target(pool: str | None, site: str | None) -> dict[str, Any]:
    return {"siteId": site} if site else {"poolId": pool}


def tokens_create(
    op: Operator,
    pool: str | None,
    site: str | None,
    ttl: int | None,
    max_uses: int | None,
    require_approval: bool,
    discovery: str | None,
    tpm: str | None,
    description: str | None,
    identity: str | None = None,
) -> Exit:
    body = _target(pool, site)
    if ttl is not None:
        body["ttlSeconds"] = ttl
    if max_uses is not None:
        body["maxUses"] = max_uses
    if require_approval:
        body["requireApproval"] = True
    attestation = {k: v for k, v in (("discovery", discovery), ("tpm", tpm), ("identity", identity)) if v}
    if attestation:
        body["attestation"] = attestation
    if description:
        body["description"] = description
    item, now = op.call("joinTokens/create", body)
    if op.json:
        render.print_json(item, op.out)
        return Exit.OK
    where = f"pool {item.get('poolId')}" if item.get("poolId") else f"site {item.get('siteId')}"
    uses = item.get("maxUses")
    print(
        f"Created join token {item.get('tokenId')} for {where}: {uses} use{'' if uses == 1 else 's'}, "
        f"expires {render.until(item.get('expiresAt'), now)}"
        + (", every join waits for approval." if item.get("requireApproval") else "."),
        file=op.out,
    )
    print("The token (shown only now; keep it secret):", file=op.out)
    print(f"  {item.get('token')}", file=op.out)
    print("A machine joins with:", file=op.out)
    print(f"  joinplane join --url {op.client.url} --token {item.get('token')} --wait", file=op.out)
    return Exit.OK


def tokens_list(
    op: Operator, pool: str | None, site: str | None, limit: int | None, cursor: str | None, every: bool
) -> Exit:
    items, next_cursor, now = op.pages(
        "joinTokens/list",
        _target(pool, site),
        "joinTokens",
        "join token",
        limit=limit,
        cursor=cursor,
        every=every,
    )
    columns: list[Column] = [
        ("token", lambda t: t.get("tokenId")),
        ("state", lambda t: t.get("state")),
        ("for", lambda t: f"pool {t['poolId']}" if t.get("poolId") else f"site {t.get('siteId')}"),
        ("uses left", lambda t: f"{t.get('usesRemaining')}/{t.get('maxUses')}"),
        ("approval", lambda t: t.get("requireApproval")),
        ("expires", lambda t: render.expiry(t.get("state"), t.get("expiresAt"), now)),
        ("description", lambda t: t.get("description")),
    ]
    return op.listing(items, next_cursor, "joinTokens", columns, f"No join tokens for {pool or site}.")


def tokens_revoke(op: Operator, token_id: str) -> Exit:
    item, _ = op.call("joinTokens/revoke", {"tokenId": token_id})
    return op.show(
        item,
        f"Revoked join token {token_id}: machines can no longer join with it.",
        [("state", item.get("state")), ("revoked", item.get("revokedAt"))],
    )


# --- pools ---------------------------------------------------------------------------------


def _pool_pairs(item: dict[str, Any], now: float) -> list[tuple[str, Any]]:
    return [
        ("pool", item.get("poolId")),
        ("name", item.get("name")),
        ("site", item.get("siteId")),
        ("workspace", item.get("workspaceId")),
        ("state", item.get("state")),
        ("join requests wait", _duration(item.get("joinRequestTtlSeconds"))),
        ("certificates last", _duration(item.get("certificateTtlSeconds"))),
        ("created", f"{item.get('createdAt')} ({render.since(item.get('createdAt'), now)})"),
        ("archived", item.get("archivedAt")),
        ("bootstrap", item.get("bootstrap") or None),
        ("cluster", item.get("cluster")),
    ]


def pools_create(
    op: Operator,
    pool: str,
    site: str,
    name: str | None,
    workspace: str | None,
    request_ttl: int | None,
    certificate_ttl: int | None,
) -> Exit:
    body: dict[str, Any] = {
        "poolId": pool,
        "siteId": site,
        "name": name or pool,
        "workspaceId": workspace or pool,
    }
    if request_ttl is not None:
        body["joinRequestTtlSeconds"] = request_ttl
    if certificate_ttl is not None:
        body["certificateTtlSeconds"] = certificate_ttl
    item, now = op.call("pools/create", body)
    return op.show(item, f"Created pool {pool} in site {site}.", _pool_pairs(item, now))


def pools_get(op: Operator, pool: str) -> Exit:
    item, now = op.call("pools/get", {"poolId": pool})
    return op.show(item, f"Pool {pool}:", _pool_pairs(item, now))


def pools_archive(op: Operator, pool: str) -> Exit:
    item, now = op.call("pools/archive", {"poolId": pool})
    return op.show(item, f"Archived pool {pool}: it takes no new joins or tokens.", _pool_pairs(item, now))


def pools_list(
    op: Operator, site: str | None, state: str | None, limit: int | None, cursor: str | None, every: bool
) -> Exit:
    body: dict[str, Any] = {}
    if site:
        body["siteId"] = site
    if state:
        body["state"] = state
    items, next_cursor, now = op.pages(
        "pools/list", body, "pools", "pool", limit=limit, cursor=cursor, every=every
    )
    columns: list[Column] = [
        ("pool", lambda p: p.get("poolId")),
        ("name", lambda p: p.get("name")),
        ("site", lambda p: p.get("siteId")),
        ("workspace", lambda p: p.get("workspaceId")),
        ("state", lambda p: p.get("state")),
        ("created", lambda p: render.since(p.get("createdAt"), now)),
    ]
    return op.listing(items, next_cursor, "pools", columns, f"No pools in tenant {op.tenant}.")


# --- machines ------------------------------------------------------------------------------


def machines_list(
    op: Operator, pool: str, state: str | None, limit: int | None, cursor: str | None, every: bool
) -> Exit:
    body: dict[str, Any] = {"poolId": pool}
    if state:
        body["state"] = state
    items, next_cursor, now = op.pages(
        "machines/list", body, "machines", "machine", limit=limit, cursor=cursor, every=every
    )
    columns: list[Column] = [
        ("machine", lambda m: m.get("machineId")),
        ("state", lambda m: m.get("state")),
        ("host", lambda m: m.get("hostname")),
        ("resources", _machine_line),
        ("schedulable", lambda m: m.get("schedulable")),
        ("certificate", lambda m: render.expiry(m.get("state"), m.get("certificateExpiresAt"), now)),
        ("joined", lambda m: render.since(m.get("joinedAt"), now)),
    ]
    return op.listing(items, next_cursor, "machines", columns, f"No machines in pool {pool}.")


def machines_revoke(op: Operator, machine_id: str, reason: str | None) -> Exit:
    body: dict[str, Any] = {"machineId": machine_id}
    if reason:
        body["reason"] = reason
    item, _ = op.call("machines/revoke", body)
    return op.show(
        item,
        f"Revoked machine {machine_id}: its token, certificate renewals and re-joins stop working.",
        [("state", item.get("state")), ("host", item.get("hostname")), ("reason", item.get("revokeReason"))],
    )


# --- audit ---------------------------------------------------------------------------------

_NOT_SUBJECTS = frozenset({"eventId", "tenantId", "siteId", "poolId", "tokenId"})


def flatten(event: dict[str, Any]) -> dict[str, Any]:
    """The event's own fields and its `detail` (where the subject ids, state and reason live) as
    one mapping; the envelope wins where both have a field."""
    detail = event.get("detail")
    return {
        **(detail if isinstance(detail, dict) else {}),
        **{k: v for k, v in event.items() if k != "detail"},
    }


def event_subject(event: dict[str, Any]) -> str:
    """The thing an event is about: its request for join-request events, its machine for machine
    events, else the first other id it carries."""
    fields = flatten(event)
    kind = str(fields.get("detailType", ""))
    if ".join-request." in kind and fields.get("requestId"):
        return str(fields["requestId"])
    if ".machine." in kind and fields.get("machineId"):
        return str(fields["machineId"])
    for name, value in sorted(fields.items()):
        if name.endswith("Id") and name not in _NOT_SUBJECTS and isinstance(value, str) and value:
            return value
    return ""


def audit_list(
    op: Operator,
    pool: str | None,
    detail_type: str | None,
    limit: int | None,
    cursor: str | None,
    every: bool,
) -> Exit:
    body: dict[str, Any] = {}
    if pool:
        body["poolId"] = pool
    if detail_type:
        # `join-request.approved` is what the table shows; the API wants the full detail-type.
        body["detailType"] = detail_type if detail_type.startswith("security.") else f"security.{detail_type}"
    items, next_cursor, now = op.pages(
        "auditEvents/list", body, "events", "audit event", limit=limit, cursor=cursor, every=every
    )
    columns: list[Column] = [
        ("when", lambda e: render.since(e.get("occurredAt"), now)),
        ("event", lambda e: str(e.get("detailType", "")).removeprefix("security.")),
        ("subject", event_subject),
        ("state", lambda e: flatten(e).get("state")),
        ("pool", lambda e: e.get("poolId")),
        ("by", lambda e: flatten(e).get("decidedBy")),
        ("reason", lambda e: flatten(e).get("reason")),
    ]
    return op.listing(items, next_cursor, "events", columns, "No audit events.")


# --- certificate authorities ---------------------------------------------------------------------


def _ca_pairs(item: dict[str, Any], now: float) -> list[tuple[str, Any]]:
    active = _object(item.get("active"))
    bundle = _list(item.get("bundle"))
    return [
        ("ca", active.get("caId")),
        ("state", active.get("state")),
        ("valid", f"{active.get('notBefore')} to {active.get('notAfter')}"),
        ("created", f"{active.get('createdAt')} ({render.since(active.get('createdAt'), now)})"),
        ("upstream root", "yes" if active.get("upstream") else "no (self-signed)"),
        ("bundle", f"{len(bundle)} certificate{'' if len(bundle) == 1 else 's'} to trust"),
    ]


def _ca_answer(op: Operator, route: str, pool: str, bundle_out: str | None) -> tuple[dict[str, Any], float]:
    item, now = op.call(route, {"poolId": pool})
    bundle = _list(item.get("bundle"))
    if not isinstance(item.get("active"), dict) or not bundle or not all(isinstance(p, str) for p in bundle):
        raise CliError("the server's answer was not a pool's certificate authorities")
    if bundle_out:
        # The PEMs machines and verifiers should trust: `openssl verify -CAfile <file> machine.crt`.
        with open(bundle_out, "w", encoding="ascii") as out:
            out.write("".join(pem if pem.endswith("\n") else pem + "\n" for pem in bundle))
    return item, now


def ca_get(op: Operator, pool: str, bundle_out: str | None) -> Exit:
    item, now = _ca_answer(op, "certificateAuthorities/get", pool, bundle_out)
    return op.show(item, f"Certificate authority of pool {pool}:", _ca_pairs(item, now))


def ca_rotate(op: Operator, pool: str, bundle_out: str | None) -> Exit:
    item, now = _ca_answer(op, "certificateAuthorities/rotate", pool, bundle_out)
    headline = (
        f"Rotated the CA of pool {pool}: new certificates come from it; machines trust it from "
        "their next renewal, and the previous CA stays in the bundle until its certificates expire."
    )
    return op.show(item, headline, _ca_pairs(item, now))
