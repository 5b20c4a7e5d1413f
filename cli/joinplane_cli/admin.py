"""The operator's side: pools, join tokens, the join-request queue, machines and the audit trail."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from joinplane_cli import render
from joinplane_cli.api import ApiError, Client
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.options import described
from joinplane_cli.render import Column

API = "/api/compute"
# A listing across pools (machines, join tokens, CAs) reads at most this many pools, in at most this
# many pages of pools/list: a command at a terminal stays a few seconds long whatever the tenant holds.
MAX_POOLS = 200
MAX_POOL_PAGES = 10
# Each list's id field, what `--quiet` prints.
_ID_OF = {
    "requests": "requestId",
    "joinTokens": "tokenId",
    "pools": "poolId",
    "machines": "machineId",
    "apiKeys": "keyId",
    "events": "eventId",
}


@dataclass
class Operator:
    client: Client
    tenant: str
    output: str = "table"
    quiet: bool = False  # lists: the ids alone, one per line, for `$(...)` in scripts
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

    def pools_seen(self, *, active_only: bool = False) -> tuple[list[dict[str, Any]], bool]:
        """The pools this key can see (pools/list filters them), at most `MAX_POOLS`; and whether
        there were more than that."""
        body: dict[str, Any] = {"state": "active"} if active_only else {}
        seen: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_POOL_PAGES):
            page, cursor, _now = self.pages(
                "pools/list", body, "pools", "pool", limit=200, cursor=cursor, every=False
            )
            seen += page
            if cursor is None or len(seen) >= MAX_POOLS:
                break
        return seen[:MAX_POOLS], cursor is not None or len(seen) > MAX_POOLS

    def across_pools(
        self,
        route: str,
        body: dict[str, Any],
        key: str,
        thing: str,
        *,
        limit: int | None,
        every: bool,
        sites: bool = False,
    ) -> tuple[list[dict[str, Any]], float]:
        """A list route that takes one pool (machines, join tokens), asked of every pool this key
        sees, as the server's joinRequests/list does by itself; with `sites`, of those pools' sites
        too. Bounded: at most `MAX_POOLS` pools, one page each unless `every`; what was left out is
        said on stderr with the --pool that shows it. A pool whose list this key may not read
        (a grant on pools but not on machines) is skipped and counted."""
        pools, more_pools = self.pools_seen()
        owners: list[tuple[str, dict[str, Any]]] = [
            (str(p.get("poolId")), {"poolId": p.get("poolId")}) for p in pools
        ]
        if sites:
            for site in sorted({str(p.get("siteId")) for p in pools if p.get("siteId")}):
                owners.append((f"site {site}", {"siteId": site}))
        items: list[dict[str, Any]] = []
        unfinished: list[str] = []
        skipped = 0
        now = time.time()
        for name, owner in owners:
            try:
                found, next_cursor, now = self.pages(
                    route, {**body, **owner}, key, thing, limit=limit, cursor=None, every=every
                )
            except ApiError as refused:
                if refused.code in ("PERMISSION_DENIED", "NOT_FOUND"):
                    skipped += 1
                    continue
                raise
            items += found
            if next_cursor:
                unfinished.append(name)
        if more_pools:
            print(f"(only the first {MAX_POOLS} pools were read: --pool POOL for the others)", file=self.err)
        for name in unfinished:
            option = f"--site {name[5:]}" if name.startswith("site ") else f"--pool {name}"
            print(f"(more in {name}: {option} --all)", file=self.err)
        if skipped:
            print(
                f"({skipped} of {len(owners)} skipped: this key may not list their {thing}s)", file=self.err
            )
        return items, now

    def listing(
        self,
        items: list[dict[str, Any]],
        next_cursor: str | None,
        key: str,
        columns: Sequence[Column],
        empty: str,
    ) -> Exit:
        if self.quiet:
            for item in items:
                print(render.cell(item.get(_ID_OF[key])), file=self.out)
            return Exit.OK
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


def whoami_tenant(client: Client) -> str:
    """The tenant of the API key in use, asked of the server: `--tenant` may be left out."""
    try:
        item = client.post(f"{API}/apiKeys/whoami", {}).body
    except ApiError as failed:
        if failed.status == 404 and not failed.enveloped:
            # Not a Joinplane API at that URL (the likelier case), or one too old to have whoami: the
            # same exit as any command's wrong-URL hint (docs/cli.md), with the way round the second.
            failed.message += " (If it is a Joinplane API without apiKeys/whoami, pass --tenant.)"
        raise
    tenant = item.get("tenantId")
    if not isinstance(tenant, str) or not tenant:
        raise CliError("the server's answer was not an API key (no tenantId); pass --tenant")
    return tenant


def _ago(occurred_at: Any, now: float) -> str:
    """`<time> (<how long ago>)`, or none when it never happened."""
    words = render.since(occurred_at, now)
    return render.NONE if words == render.NONE else f"{occurred_at} ({words})"


def _when(state: Any, expires_at: Any, now: float) -> str:
    words = render.expiry(state, expires_at, now)
    return render.NONE if words == render.NONE else f"{expires_at} ({words})"


# --- join requests -------------------------------------------------------------------------


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
        ("host", lambda r: _object(r.get("machine")).get("hostname")),
        ("resources", lambda r: _machine_line(_object(r.get("machine")))),
        ("deferred because", lambda r: [_object(x).get("code") for x in _list(r.get("reasons"))]),
        ("asked", lambda r: render.since(r.get("createdAt"), now)),
        ("expires", lambda r: render.expiry(r.get("state"), r.get("expiresAt"), now)),
    ]
    if any(r.get("reason") for r in items):
        columns.append(("reason", lambda r: r.get("reason")))
    where = "" if state == "all" else f"{state} "
    scope = f"for pool {pool}" if pool else "in the pools this key can see"
    return op.listing(items, next_cursor, "requests", columns, f"No {where}join requests {scope}.")


def _request_line(r: dict[str, Any]) -> str:
    machine = _object(r.get("machine"))
    where = r.get("poolId") or f"site {r.get('siteId')}"
    why = render.cell([_object(x).get("code") for x in _list(r.get("reasons"))])
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
    machine = _object(item.get("machine"))
    return [
        ("state", item.get("state")),
        (
            "pool",
            item.get("poolId") or (f"site {item['siteId']} (unclaimed)" if item.get("siteId") else None),
        ),
        ("host", machine.get("hostname")),
        ("resources", _machine_line(machine)),
        ("reason", item.get("reason")),
        ("expires", _when(item.get("state"), item.get("expiresAt"), now)),
    ]


def requests_get(op: Operator, pool: str | None, request_id: str) -> Exit:
    body: dict[str, Any] = {"requestId": request_id}
    if pool:
        body["poolId"] = pool
    item, now = op.call("joinRequests/get", body)
    pairs = _request_pairs(item, now)
    # One request, read by a person deciding it: each reason with its words (why a TPM was not
    # trusted, which manufacturer did not issue it), not only its code as the queue's table has.
    reasons = [_object(x) for x in _list(item.get("reasons"))]
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
    if verb == "approve":
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
            machine = _object(item.get("machine"))
            where = f" ({machine.get('hostname') or '?'} in {item.get('poolId') or '?'})"
            print(headline.replace(":", where + ":", 1), file=op.out)
    if op.json:
        render.print_json({"requests": decided, "refused": refused}, op.out)
    return exit_code


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
    token_out: str | None = None,
    tpm_trust: str | None = None,
    tpm_rejoin: str | None = None,
    aws: dict[str, list[str]] | None = None,
) -> Exit:
    body = _target(pool, site)
    if ttl is not None:
        body["ttlSeconds"] = ttl
    if max_uses is not None:
        body["maxUses"] = max_uses
    if require_approval:
        body["requireApproval"] = True
    chosen = [("discovery", discovery), ("tpm", tpm), ("identity", identity)]
    chosen += [("tpmTrust", tpm_trust), ("tpmRejoin", tpm_rejoin)]
    attestation: dict[str, Any] = {k: v for k, v in chosen if v}
    if aws:
        attestation["aws"] = aws
    if attestation:
        body["attestation"] = attestation
    if description:
        body["description"] = description
    item, now = op.call("joinTokens/create", body)
    secret = item.get("token")
    if token_out:
        if not isinstance(secret, str) or not secret.startswith("jpt_"):
            raise CliError("the server's answer holds no join token (jpt_...)")
        _write_secret(token_out, secret + "\n")
    if op.json:
        render.print_json(item, op.out)
        return Exit.OK
    where = f"pool {item.get('poolId')}" if item.get("poolId") else f"site {item.get('siteId')}"
    uses = item.get("maxUses")
    settings = item.get("attestation")
    tpm = settings.get("tpm") if isinstance(settings, dict) else None
    # A machine that joins without --tpm through a token that wants its TPM is denied or waits:
    # the command printed for it must carry the option.
    wants_tpm = tpm in ("require", "defer-unlisted")
    print(
        f"Created join token {item.get('tokenId')} for {where}: {uses} use{'' if uses == 1 else 's'}, "
        f"expires {render.until(item.get('expiresAt'), now)}"
        + (", every join waits for approval" if item.get("requireApproval") else "")
        + (f", TPM {tpm} (joins with --tpm)" if wants_tpm else "")
        + ".",
        file=op.out,
    )
    if aws:
        # Its secret admits no one (the aws attestor denies a join without a signed request).
        print("A machine in AWS joins with no secret, by the token's id (docs/aws.md):", file=op.out)
        print(
            f"  joinplane join --url {op.client.url} --aws-iam --token-id {item.get('tokenId')} --wait"
            + (" --tpm" if wants_tpm else ""),
            file=op.out,
        )
        return Exit.OK
    if token_out:
        print(f"The token is in {token_out} (mode 0600; keep it secret). A machine joins with:", file=op.out)
        print(
            f"  joinplane join --url {op.client.url} --token-file {token_out} --wait"
            + (" --tpm" if wants_tpm else ""),
            file=op.out,
        )
        return Exit.OK
    print("The token (shown only now; keep it secret):", file=op.out)
    print(f"  {secret}", file=op.out)
    print("A machine joins with:", file=op.out)
    print(
        f"  joinplane join --url {op.client.url} --token {secret} --wait" + (" --tpm" if wants_tpm else ""),
        file=op.out,
    )
    return Exit.OK


def _write_secret(path: str, text: str) -> None:
    """A secret into a file only its owner reads (a file that exists is replaced, never widened)."""
    target = Path(path).expanduser()
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(descriptor, 0o600)
            os.write(descriptor, text.encode())
        finally:
            os.close(descriptor)
    except OSError as failed:
        raise CliError(f"--token-out {path}: {failed.strerror or failed}", Exit.USAGE) from None


def tokens_list(
    op: Operator, pool: str | None, site: str | None, limit: int | None, cursor: str | None, every: bool
) -> Exit:
    """A pool's or a site's join tokens, or (neither) those of every pool the key sees and of their
    sites."""
    _one_pool_cursor(pool, site, cursor)
    next_cursor = None
    if pool or site:
        items, next_cursor, now = op.pages(
            "joinTokens/list",
            _target(pool, site),
            "joinTokens",
            "join token",
            limit=limit,
            cursor=cursor,
            every=every,
        )
    else:
        items, now = op.across_pools(
            "joinTokens/list", {}, "joinTokens", "join token", limit=limit, every=every, sites=True
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
    where = f"for {pool or site}" if pool or site else "in the pools this key can see"
    return op.listing(items, next_cursor, "joinTokens", columns, f"No join tokens {where}.")


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
        ("new CAs sign after", _duration(item.get("caPropagationSeconds"))),
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
    ca_propagation: int | None = None,
    bootstrap: Bootstrap | None = None,
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
    if ca_propagation is not None:
        body["caPropagationSeconds"] = ca_propagation
    if bootstrap is not None:
        body["bootstrap"] = bootstrap.fields
    item, now = op.call("pools/create", body)
    if not _object(item.get("bootstrap")).get("controlplaneHttpUrl") and not op.json:
        # levers9's machines find their control plane by this URL: a pool without one admits machines
        # that have nowhere to go. Not an error (it may be set before the first token is made).
        print(
            f"note: pool {pool} hands its machines no controlplaneHttpUrl; set it with "
            f"`joinplane pools update {pool} --controlplane-url URL`",
            file=op.err,
        )
    return op.show(item, f"Created pool {pool} in site {site}.", _pool_pairs(item, now))


@dataclass
class Bootstrap:
    """The bootstrap defaults an operator gave: `fields` (from --bootstrap FILE, with
    --controlplane-url over it), and whether they are the whole object (`whole`: the file) or
    changes to the pool's current one (only --controlplane-url)."""

    fields: dict[str, Any]
    whole: bool


def read_bootstrap(path: str | None, controlplane_url: str | None) -> Bootstrap | None:
    """--bootstrap FILE (a JSON object: levers9's bootstrap fields, docs/cli.md) and --controlplane-url."""
    if path is None and controlplane_url is None:
        return None
    fields: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as failed:
            reason = failed.strerror if isinstance(failed, OSError) else "not UTF-8 text"
            raise CliError(f"--bootstrap {path}: {reason or failed}", Exit.USAGE) from None
        try:
            document = json.loads(text)
        except ValueError:
            raise CliError(f"--bootstrap {path} is not JSON", Exit.USAGE) from None
        if not isinstance(document, dict):
            raise CliError(f"--bootstrap {path} must hold a JSON object (the bootstrap's fields)", Exit.USAGE)
        fields = document
    if controlplane_url is not None:
        scheme = urllib.parse.urlsplit(controlplane_url)
        if scheme.scheme not in ("http", "https") or not scheme.netloc:
            raise CliError(
                f"--controlplane-url must be an http:// or https:// URL, got {controlplane_url!r}", Exit.USAGE
            )
        fields = {**fields, "controlplaneHttpUrl": controlplane_url}
    return Bootstrap(fields, whole=path is not None)


def pools_update(
    op: Operator,
    pool: str,
    name: str | None,
    workspace: str | None,
    request_ttl: int | None,
    certificate_ttl: int | None,
    ca_propagation: int | None = None,
    bootstrap: Bootstrap | None = None,
) -> Exit:
    changes: dict[str, Any] = {
        key: value
        for key, value in (
            ("name", name),
            ("workspaceId", workspace),
            ("joinRequestTtlSeconds", request_ttl),
            ("certificateTtlSeconds", certificate_ttl),
            ("caPropagationSeconds", ca_propagation),
        )
        if value is not None
    }
    if bootstrap is not None and bootstrap.whole:
        changes["bootstrap"] = bootstrap.fields
    elif bootstrap is not None:
        # The API replaces the bootstrap whole; one field changed keeps the others as they are now.
        # Read, then written: two operators changing a pool's bootstrap at once, the later wins,
        # as with --name.
        current, _ = op.call("pools/get", {"poolId": pool})
        changes["bootstrap"] = {**_object(current.get("bootstrap")), **bootstrap.fields}
    if not changes:
        raise CliError(
            "nothing to change: give --name, --workspace, --join-request-ttl, --certificate-ttl, "
            "--ca-propagation, --controlplane-url or --bootstrap",
            Exit.USAGE,
        )
    item, now = op.call("pools/update", {"poolId": pool, **changes})
    return op.show(item, f"Updated pool {pool}.", _pool_pairs(item, now))


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


def _one_pool_cursor(pool: str | None, site: str | None, cursor: str | None) -> None:
    if cursor and not pool and not site:
        raise CliError("--cursor continues one pool's list: give its --pool as well", Exit.USAGE)


def machines_list(
    op: Operator, pool: str | None, state: str | None, limit: int | None, cursor: str | None, every: bool
) -> Exit:
    """One pool's machines, or (no pool) those of every pool the key sees."""
    _one_pool_cursor(pool, None, cursor)
    body: dict[str, Any] = {}
    if state:
        body["state"] = state
    next_cursor = None
    if pool:
        items, next_cursor, now = op.pages(
            "machines/list",
            {**body, "poolId": pool},
            "machines",
            "machine",
            limit=limit,
            cursor=cursor,
            every=every,
        )
    else:
        items, now = op.across_pools("machines/list", body, "machines", "machine", limit=limit, every=every)
    columns: list[Column] = [
        ("machine", lambda m: m.get("machineId")),
        ("state", lambda m: m.get("state")),
        *([] if pool else [("pool", lambda m: m.get("poolId"))]),
        ("host", lambda m: m.get("hostname")),
        ("resources", _machine_line),
        ("schedulable", lambda m: m.get("schedulable")),
        ("certificate", lambda m: render.expiry(m.get("state"), m.get("certificateExpiresAt"), now)),
        ("joined", lambda m: render.since(m.get("joinedAt"), now)),
    ]
    empty = f"No machines in pool {pool}." if pool else "No machines in the pools this key can see."
    return op.listing(items, next_cursor, "machines", columns, empty)


def _tpm_line(tpm: dict[str, Any]) -> str | None:
    """What the join proved of the machine's TPM (docs/tpm.md), in one line; None without one."""
    ek = tpm.get("ekPublicKeySha256")
    if not ek:
        return None
    if not tpm.get("activated"):
        return f"EK {ek}: not activated (counts as no TPM)"
    how = tpm.get("verifiedBy")
    if how == "manufacturer" and tpm.get("manufacturer"):
        how = f"manufacturer {tpm['manufacturer']}"
    problem = tpm.get("ekCertificateProblem")
    trusted = f"verified by {how}" if how else "not trusted" + (f": {problem}" if problem else "")
    issuer = tpm.get("ekCertificateIssuer")
    certificate = f"; EK certificate of {issuer}, serial {tpm.get('ekCertificateSerial')}" if issuer else ""
    return f"EK {ek}: activated, {trusted}{certificate}"


def _aws_line(aws: dict[str, Any]) -> str | None:
    """Who the machine is in AWS, as its IAM join proved (docs/aws.md); None for other joins."""
    if not aws.get("arn"):
        return None
    instance = f" (instance {aws['instanceId']})" if aws.get("instanceId") else ""
    return f"{aws['arn']}{instance}"


def machines_get(op: Operator, machine_id: str) -> Exit:
    item, now = op.call("machines/get", {"machineId": machine_id})
    return op.show(
        item,
        f"Machine {machine_id}:",
        [
            ("state", item.get("state")),
            ("pool", item.get("poolId")),
            ("host", item.get("hostname")),
            ("resources", _machine_line(item)),
            ("schedulable", item.get("schedulable")),
            (
                "certificate",
                _when(item.get("state"), item.get("certificateExpiresAt"), now),
            ),
            # What each security event about it names: its key and the serials of its certificates.
            ("key sha256", item.get("publicKeySha256")),
            ("certificates", [_object(c).get("serial") for c in _list(item.get("certificates"))]),
            ("tpm", _tpm_line(_object(item.get("tpm")))),
            ("aws", _aws_line(_object(item.get("aws")))),
            ("joined", f"{item.get('joinedAt')} ({render.since(item.get('joinedAt'), now)})"),
            ("rejoined", _ago(item.get("rejoinedAt"), now)),
            ("renewed", _ago(item.get("lastRenewedAt"), now)),
            ("revoked", item.get("revokedAt")),
            ("reason", item.get("revokeReason")),
        ],
    )


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


# --- API keys ------------------------------------------------------------------------------


def _key_pairs(item: dict[str, Any], now: float) -> list[tuple[str, Any]]:
    return [
        ("key", item.get("keyId")),
        ("tenant", item.get("tenantId")),
        ("grants", ", ".join(str(g) for g in _list(item.get("grants")))),
        ("description", item.get("description") or None),
        ("state", item.get("state")),
        ("created", f"{item.get('createdAt')} ({render.since(item.get('createdAt'), now)})"),
        ("revoked", item.get("revokedAt")),
    ]


def apikeys_create(op: Operator, grants: list[str], description: str) -> Exit:
    item, now = op.call("apiKeys/create", {"grants": grants, "description": description})
    if op.json:
        render.print_json(item, op.out)
        return Exit.OK
    print(f"Created API key {item.get('keyId')} in tenant {item.get('tenantId')}.", file=op.out)
    render.fields(_key_pairs(item, now), op.out)
    print("The key (shown only now; keep it secret):", file=op.out)
    print(f"  {item.get('key')}", file=op.out)
    print("Use it with:", file=op.out)
    print(f"  export JOINPLANE_API_KEY={item.get('key')}", file=op.out)
    return Exit.OK


def apikeys_list(op: Operator, limit: int | None, cursor: str | None, every: bool) -> Exit:
    items, next_cursor, now = op.pages(
        "apiKeys/list", {}, "apiKeys", "API key", limit=limit, cursor=cursor, every=every
    )
    columns: list[Column] = [
        ("key", lambda k: k.get("keyId")),
        ("state", lambda k: k.get("state")),
        ("grants", lambda k: ", ".join(str(g) for g in _list(k.get("grants")))),
        ("description", lambda k: k.get("description")),
        ("created", lambda k: render.since(k.get("createdAt"), now)),
    ]
    return op.listing(items, next_cursor, "apiKeys", columns, f"No API keys in tenant {op.tenant}.")


def apikeys_revoke(op: Operator, key_id: str) -> Exit:
    item, now = op.call("apiKeys/revoke", {"keyId": key_id})
    return op.show(
        item,
        f"Revoked API key {key_id}: apiKeys/whoami refuses it now; other routes may still accept it for "
        "up to 5 minutes, while API Gateway's authorizer cache holds it.",
        _key_pairs(item, now),
    )


def apikeys_whoami(op: Operator) -> Exit:
    response = op.client.post(f"{API}/apiKeys/whoami", {})
    return op.show(response.body, "The API key in use:", _key_pairs(response.body, response.now()))


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
    if ".join-token." in kind and fields.get("tokenId"):
        return str(fields["tokenId"])
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
        *_phase_pairs(item, now),
        ("bundle", f"{len(bundle)} certificate{'' if len(bundle) == 1 else 's'} to trust"),
        *([("bundle url", item["bundleUrl"])] if isinstance(item.get("bundleUrl"), str) else []),
        *_pending_pair(item, now),
    ]


def _phase_pairs(item: dict[str, Any], now: float) -> list[tuple[str, Any]]:
    """A rotation's phases: the prepared CA and when it signs, the retired ones and when they leave."""
    pairs: list[tuple[str, Any]] = []
    prepared = item.get("next")
    if isinstance(prepared, dict):
        when = prepared.get("activatesAt")
        pairs.append(
            (
                "next ca",
                f"{prepared.get('caId')}, prepared: in the bundle, signs from {when} "
                f"({render.until(when, now)}) or on `ca activate`",
            )
        )
    for retired in _list(item.get("retired")):
        if isinstance(retired, dict):
            until = retired.get("bundleUntil")
            pairs.append(
                (
                    "retired ca",
                    f"{retired.get('caId')}: signs nothing, in the bundle until {until} "
                    f"({render.until(until, now)})",
                )
            )
    return pairs


def _pending_pair(item: dict[str, Any], now: float) -> list[tuple[str, Any]]:
    """The CSR awaiting the organisation's signature (createCsr), when there is one."""
    pending = item.get("pending")
    if not isinstance(pending, dict):
        return []
    created = pending.get("createdAt")
    return [
        (
            "pending request",
            f"{pending.get('caId')}, asked {render.since(created, now)}: sign its CSR, then `ca import`",
        )
    ]


def _ca_answer(
    op: Operator, route: str, pool: str, bundle_out: str | None, extra: dict[str, Any] | None = None
) -> tuple[dict[str, Any], float]:
    item, now = op.call(route, {"poolId": pool, **(extra or {})})
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


def ca_rotate(op: Operator, pool: str, bundle_out: str | None, emergency: bool = False) -> Exit:
    item, now = _ca_answer(
        op, "certificateAuthorities/rotate", pool, bundle_out, {"emergency": True} if emergency else None
    )
    prepared = _object(item.get("next"))
    if prepared:
        when = prepared.get("activatesAt")
        headline = (
            f"Prepared CA {prepared.get('caId')} for pool {pool}: it is in the bundle now and signs from "
            f"{when} ({render.until(when, now)}), or at once with `joinplane ca activate`. Until then "
            "the current CA signs; verifiers must fetch the bundle again before then."
        )
    else:
        headline = (
            f"Rotated the CA of pool {pool} in an emergency: CA {_object(item.get('active')).get('caId')} "
            "signs from now on."
        )
    if isinstance(item.get("breaks"), str) and not op.json:
        print(f"warning: {item['breaks']}", file=op.err)
    return op.show(item, headline, _ca_pairs(item, now))


def ca_activate(op: Operator, pool: str, ca_id: str | None, bundle_out: str | None) -> Exit:
    item, now = _ca_answer(
        op, "certificateAuthorities/activate", pool, bundle_out, {"caId": ca_id} if ca_id else None
    )
    active = _object(item.get("active"))
    headline = (
        f"CA {active.get('caId')} of pool {pool} signs from now on; the previous CA signs nothing more "
        "and stays in the bundle until its certificates expire."
    )
    return op.show(item, headline, _ca_pairs(item, now))


_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.DOTALL)


def _read_pems(path: str, option: str) -> list[str]:
    """The PEM certificates in a file, in order; a usage error when there are none."""
    try:
        text = Path(path).expanduser().read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as failed:
        reason = failed.strerror if isinstance(failed, OSError) else "not a PEM (ASCII) file"
        raise CliError(f"{option} {path}: {reason or failed}", Exit.USAGE) from None
    pems = [match.group(0) + "\n" for match in _PEM_CERTIFICATE.finditer(text)]
    if not pems:
        raise CliError(f"{option} {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", Exit.USAGE)
    return pems


def ca_create_csr(op: Operator, pool: str, out: str | None) -> Exit:
    item, _ = op.call("certificateAuthorities/createCsr", {"poolId": pool})
    csr, ca_id = item.get("csr"), item.get("caId")
    if not isinstance(csr, str) or "-----BEGIN CERTIFICATE REQUEST-----" not in csr:
        raise CliError("the server's answer was not a CSR")
    if out:
        with open(out, "w", encoding="ascii") as written:
            written.write(csr if csr.endswith("\n") else csr + "\n")
    if op.json:
        render.print_json(item, op.out)
        return Exit.OK
    if not out:
        print(csr, end="" if csr.endswith("\n") else "\n", file=op.out)
    print(
        f"{'Wrote the' if out else 'The'} CSR of the pending CA {ca_id} of pool {pool}"
        + (f" to {out}" if out else " (above)")
        + ". Have your organisation's CA sign it as a CA certificate (CA:TRUE, pathlen:0, keyCertSign and "
        f"cRLSign), then: joinplane ca import --pool {pool} --certificate CA.crt --chain CHAIN.pem",
        file=op.err if not out else op.out,
    )
    return Exit.OK


def ca_import(op: Operator, pool: str, certificate: str, chain: str, bundle_out: str | None) -> Exit:
    (leaf, *more) = _read_pems(certificate, "--certificate")
    if more:
        raise CliError(
            f"--certificate {certificate} holds {1 + len(more)} certificates: give the pool's CA certificate "
            "alone, and its issuers with --chain",
            Exit.USAGE,
        )
    issuers = _read_pems(chain, "--chain")
    item, now = _ca_answer(
        op,
        "certificateAuthorities/importCertificate",
        pool,
        bundle_out,
        {"certificate": leaf, "chain": issuers},
    )
    prepared = _object(item.get("next"))
    if prepared:
        when = prepared.get("activatesAt")
        headline = (
            f"Imported the CA certificate of pool {pool}: CA {prepared.get('caId')}, signed by your "
            f"organisation's, is in the bundle now and signs from {when} ({render.until(when, now)}), "
            "or at once with `joinplane ca activate`; new certificates then chain to its root."
        )
    else:
        headline = (
            f"Imported the CA certificate of pool {pool}: it is the pool's active CA, signed by your "
            "organisation's; new certificates chain to its root."
        )
    return op.show(item, headline, _ca_pairs(item, now))


def ca_get_across(op: Operator, bundle_out: str | None) -> Exit:
    """The active CA of every active pool the key sees (each made on first use, as a join would)."""
    if bundle_out:
        raise CliError("--bundle-out writes one pool's bundle: give the pool", Exit.USAGE)
    pools, more = op.pools_seen(active_only=True)
    found: list[dict[str, Any]] = []
    skipped = 0
    now = time.time()
    for pool in pools:
        try:
            item, now = _ca_answer(op, "certificateAuthorities/get", str(pool.get("poolId")), None)
        except ApiError as refused:
            if refused.code in ("PERMISSION_DENIED", "NOT_FOUND"):
                skipped += 1
                continue
            raise
        found.append({"poolId": pool.get("poolId"), **item})
    if more:
        print(f"(only the first {MAX_POOLS} pools were read: give POOL_ID for the others)", file=op.err)
    if skipped:
        print(f"({skipped} of {len(pools)} pools skipped: this key may not read their CAs)", file=op.err)
    if op.json:
        render.print_json({"certificateAuthorities": found}, op.out)
        return Exit.OK
    if not found:
        print("No active pools with a CA this key can read.", file=op.out)
        return Exit.OK
    columns: list[Column] = [
        ("pool", lambda c: c.get("poolId")),
        ("ca", lambda c: _object(c.get("active")).get("caId")),
        ("expires", lambda c: render.until(_object(c.get("active")).get("notAfter"), now)),
        ("upstream root", lambda c: bool(_object(c.get("active")).get("upstream"))),
        ("bundle", lambda c: len(_list(c.get("bundle")))),
        ("pending request", lambda c: _object(c.get("pending")).get("caId")),
    ]
    render.print_table(columns, found, op.out)
    return Exit.OK
