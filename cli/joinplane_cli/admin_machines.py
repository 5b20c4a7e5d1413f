"""`joinplane machines`: joined machines: list, get (with what the join proved of the machine's
TPM), revoke."""

from __future__ import annotations

from typing import Any

from joinplane_cli import admin, render
from joinplane_cli.admin import Operator
from joinplane_cli.exits import Exit
from joinplane_cli.render import Column


def _ago(occurred_at: Any, now: float) -> str:
    """`<time> (<how long ago>)`, or none when it never happened."""
    words = render.since(occurred_at, now)
    return render.NONE if words == render.NONE else f"{occurred_at} ({words})"


def machines_list(
    op: Operator, pool: str | None, state: str | None, limit: int | None, cursor: str | None, every: bool
) -> Exit:
    """One pool's machines, or (no pool) those of every pool the key sees."""
    admin.one_pool_cursor(pool, None, cursor)
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
        ("resources", admin.machine_line),
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


def machines_get(op: Operator, machine_id: str) -> Exit:
    item, now = op.call("machines/get", {"machineId": machine_id})
    return op.show(
        item,
        f"Machine {machine_id}:",
        [
            ("state", item.get("state")),
            ("pool", item.get("poolId")),
            ("host", item.get("hostname")),
            ("resources", admin.machine_line(item)),
            ("schedulable", item.get("schedulable")),
            (
                "certificate",
                admin.expiry(item.get("state"), item.get("certificateExpiresAt"), now),
            ),
            # What each security event about it names: its key and the serials of its certificates.
            ("key sha256", item.get("publicKeySha256")),
            (
                "certificates",
                [admin.as_object(c).get("serial") for c in admin.as_list(item.get("certificates"))],
            ),
            ("tpm", _tpm_line(admin.as_object(item.get("tpm")))),
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
