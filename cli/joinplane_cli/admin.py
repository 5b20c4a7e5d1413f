"""The operator's session with the API, which every operator command goes through (the `admin_*`
modules, one per concept, and `tpm_commands`): one call, a list's pages, a list asked of every pool
the key sees, and the answer shown as a table, ids or JSON; and the reading of the server's answers
they share, where a nested field may be anything a broken server sends."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from joinplane_cli import render
from joinplane_cli.api import ApiError, Client
from joinplane_cli.exits import CliError, Exit
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


def as_object(value: Any) -> dict[str, Any]:
    """A nested object of the server's answer, or {} when it is anything else."""
    return value if isinstance(value, dict) else {}


def as_number(value: Any) -> float | None:
    """A finite number from the server's answer, or None when it is anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def machine_line(machine: dict[str, Any]) -> str:
    parts = [f"{machine.get('os') or '?'}/{machine.get('arch') or '?'}"]
    if machine.get("cpuCount"):
        parts.append(f"{machine['cpuCount']} CPU")
    memory = as_number(machine.get("memoryMb"))
    if memory:
        parts.append(f"{memory / 1024:.0f} GiB")
    if machine.get("gpuCount"):
        parts.append(f"{machine['gpuCount']} GPU")
    return " ".join(parts)


def as_list(value: Any) -> list[Any]:
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


def expiry(state: Any, expires_at: Any, now: float) -> str:
    """`<time> (<render.expiry's words>)` for one thing shown whole, or none when it has no expiry."""
    words = render.expiry(state, expires_at, now)
    return render.NONE if words == render.NONE else f"{expires_at} ({words})"


def one_pool_cursor(pool: str | None, site: str | None, cursor: str | None) -> None:
    if cursor and not pool and not site:
        raise CliError("--cursor continues one pool's list: give its --pool as well", Exit.USAGE)
