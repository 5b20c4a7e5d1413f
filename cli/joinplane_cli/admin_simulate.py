"""`joinplane pools simulate POOL --policy FILE`: what a draft join policy would have decided for the
pool's recent joins, and how many of those decisions would change (pools/simulatePolicy)."""

from __future__ import annotations

from typing import Any

from joinplane_cli import admin, render
from joinplane_cli.admin import Operator
from joinplane_cli.admin_pools import read_policy
from joinplane_cli.exits import Exit
from joinplane_cli.render import Column


def _decided(item: dict[str, Any]) -> str:
    actual = str(item.get("actual"))
    state, by = item.get("state"), item.get("decidedBy")
    if item.get("kind") == "request" and state not in (None, "pending"):
        actual += f", {state}" + (f" by {by}" if by else "")
    elif state == "revoked":
        actual += ", revoked"
    return actual


def _rule(item: dict[str, Any]) -> str:
    rule = item.get("rule")
    if rule is None:
        return "(no rule)"
    return f"{rule} (error)" if item.get("error") else str(rule)


COLUMNS: list[Column] = [
    ("host", lambda i: i.get("hostname") or i.get("id")),
    ("id", lambda i: i.get("id")),
    ("when", lambda i: i.get("at")),
    ("happened", _decided),
    ("would", lambda i: i.get("decision")),
    ("rule", _rule),
    ("change", lambda i: "CHANGE" if i.get("changed") else ""),
]


def summary(counts: dict[str, Any]) -> str:
    number = {k: int(admin.as_number(v) or 0) for k, v in counts.items()}
    line = (
        f"{number.get('total', 0)} joins: {number.get('wouldAdmit', 0)} would be admitted, "
        f"{number.get('wouldDefer', 0)} deferred, {number.get('wouldDeny', 0)} denied; "
        f"{number.get('changed', 0)} would change ({number.get('deferredWouldAdmit', 0)} deferred → admit, "
        f"{number.get('deferredWouldDeny', 0)} deferred → deny, {number.get('admittedWouldDefer', 0)} "
        f"admitted → defer, {number.get('admittedWouldDeny', 0)} admitted → deny)"
    )
    if number.get("errors"):
        line += f"; {number['errors']} evaluation errors (those defer)"
    return line


def pools_simulate(op: Operator, pool: str, policy_file: str, limit: int | None, changed_only: bool) -> Exit:
    # `-` reads the draft from standard input, as `pools update --policy` does.
    body: dict[str, Any] = {"poolId": pool, "joinPolicy": read_policy(policy_file) or []}
    if limit is not None:
        body["limit"] = limit
    result, _ = op.call("pools/simulatePolicy", body)
    items = [i for i in admin.as_list(result.get("items")) if isinstance(i, dict)]
    if changed_only:
        items = [i for i in items if i.get("changed")]
    if op.json:
        render.print_json({**result, "items": items}, op.out)
        return Exit.OK
    if op.quiet:
        for item in items:
            print(render.cell(item.get("id")), file=op.out)
        return Exit.OK
    if items:
        render.print_table(COLUMNS, items, op.out)
    else:
        print("No joins to show." if changed_only else f"Pool {pool} has no joins to simulate.", file=op.out)
    print(summary(admin.as_object(result.get("counts"))), file=op.out)
    if result.get("complete") is False:
        print(
            f"(the {render.cell(result.get('limit'))} newest requests and machines of {pool}; "
            "older joins were not simulated: see --limit)",
            file=op.err,
        )
    return Exit.OK
