"""`joinplane pools`: create, update (the bootstrap handed to the pool's machines and the join
policy included), get, archive, list."""

from __future__ import annotations

import json
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joinplane_cli import admin, render
from joinplane_cli.admin import Operator
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.render import Column


def _duration(seconds: Any) -> str:
    number = admin.as_number(seconds)
    return render.duration(number) if number is not None else render.NONE


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
        ("approvals required", item.get("approvalsRequired")),
        ("created", f"{item.get('createdAt')} ({render.since(item.get('createdAt'), now)})"),
        ("archived", item.get("archivedAt")),
        ("bootstrap", item.get("bootstrap") or None),
        ("cluster", item.get("cluster")),
        ("join policy", _policy_summary(item.get("joinPolicy"))),
    ]


def _policy_summary(rules: Any) -> render.Lines | None:
    """One line per rule, in order: its decision, its name and its condition on one line."""
    if not isinstance(rules, list) or not rules:
        return None
    lines = []
    for rule in rules:
        rule = admin.as_object(rule)
        condition = " ".join(str(rule.get("when", "")).split())
        lines.append(f"{rule.get('decision')} {rule.get('name')}: {condition}")
    return render.Lines(lines)


def read_policy(path: str | None) -> list[Any] | None:
    """--policy FILE: a join policy as JSON (docs/policy.md), either the list of rules or an object
    with `joinPolicy` (what `pools get --json` prints); `-` reads standard input; `none` is the
    empty policy, which removes it. The rules go to the server as written: it checks them."""
    if path is None:
        return None
    if path == "none":
        return []
    try:
        text = sys.stdin.read() if path == "-" else Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as failed:
        reason = failed.strerror if isinstance(failed, OSError) else "not UTF-8 text"
        raise CliError(f"--policy {path}: {reason or failed}", Exit.USAGE) from None
    try:
        document = json.loads(text)
    except ValueError as failed:
        raise CliError(f"--policy {path} is not JSON: {failed}", Exit.USAGE) from None
    if isinstance(document, dict) and "joinPolicy" in document:
        document = document["joinPolicy"]
    if not isinstance(document, list):
        raise CliError(
            f"--policy {path} must hold a JSON list of rules, or an object with joinPolicy (docs/policy.md)",
            Exit.USAGE,
        )
    return document


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
    approvals_required: int | None = None,
    policy: list[Any] | None = None,
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
    if approvals_required is not None:
        body["approvalsRequired"] = approvals_required
    if bootstrap is not None:
        body["bootstrap"] = bootstrap.fields
    if policy:
        body["joinPolicy"] = policy
    item, now = op.call("pools/create", body)
    if not admin.as_object(item.get("bootstrap")).get("controlplaneHttpUrl") and not op.json:
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
    approvals_required: int | None = None,
    policy: list[Any] | None = None,
) -> Exit:
    changes: dict[str, Any] = {
        key: value
        for key, value in (
            ("name", name),
            ("workspaceId", workspace),
            ("joinRequestTtlSeconds", request_ttl),
            ("certificateTtlSeconds", certificate_ttl),
            ("caPropagationSeconds", ca_propagation),
            ("approvalsRequired", approvals_required),
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
        changes["bootstrap"] = {**admin.as_object(current.get("bootstrap")), **bootstrap.fields}
    if policy is not None:
        changes["joinPolicy"] = policy
    if not changes:
        raise CliError(
            "nothing to change: give --name, --workspace, --join-request-ttl, --certificate-ttl, "
            "--ca-propagation, --approvals-required, --controlplane-url, --bootstrap or --policy",
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
