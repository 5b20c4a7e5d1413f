"""`joinplane apikeys`: the tenant's operator API keys: create (the secret shown once), list,
revoke, whoami."""

from __future__ import annotations

from typing import Any

from joinplane_cli import admin, render
from joinplane_cli.admin import Operator
from joinplane_cli.exits import Exit
from joinplane_cli.render import Column


def _key_pairs(item: dict[str, Any], now: float) -> list[tuple[str, Any]]:
    return [
        ("key", item.get("keyId")),
        ("tenant", item.get("tenantId")),
        ("grants", ", ".join(str(g) for g in admin.as_list(item.get("grants")))),
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
        ("grants", lambda k: ", ".join(str(g) for g in admin.as_list(k.get("grants")))),
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
    response = op.client.post(f"{admin.API}/apiKeys/whoami", {})
    return op.show(response.body, "The API key in use:", _key_pairs(response.body, response.now()))
