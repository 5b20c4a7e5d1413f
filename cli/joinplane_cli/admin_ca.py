"""`joinplane ca`: a pool's certificate authorities: get (one pool's, or every pool's), rotate,
activate; and a pool CA signed by the organisation's own CA (create-csr, then import)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from joinplane_cli import admin, render
from joinplane_cli.admin import Operator
from joinplane_cli.api import ApiError
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.render import Column


def _ca_pairs(item: dict[str, Any], now: float) -> list[tuple[str, Any]]:
    active = admin.as_object(item.get("active"))
    bundle = admin.as_list(item.get("bundle"))
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
    for retired in admin.as_list(item.get("retired")):
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
    bundle = admin.as_list(item.get("bundle"))
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
    prepared = admin.as_object(item.get("next"))
    if prepared:
        when = prepared.get("activatesAt")
        headline = (
            f"Prepared CA {prepared.get('caId')} for pool {pool}: it is in the bundle now and signs from "
            f"{when} ({render.until(when, now)}), or at once with `joinplane ca activate`. Until then "
            "the current CA signs; verifiers must fetch the bundle again before then."
        )
    else:
        active = admin.as_object(item.get("active"))
        headline = (
            f"Rotated the CA of pool {pool} in an emergency: CA {active.get('caId')} signs from now on."
        )
    if isinstance(item.get("breaks"), str) and not op.json:
        print(f"warning: {item['breaks']}", file=op.err)
    return op.show(item, headline, _ca_pairs(item, now))


def ca_activate(op: Operator, pool: str, ca_id: str | None, bundle_out: str | None) -> Exit:
    item, now = _ca_answer(
        op, "certificateAuthorities/activate", pool, bundle_out, {"caId": ca_id} if ca_id else None
    )
    active = admin.as_object(item.get("active"))
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
    prepared = admin.as_object(item.get("next"))
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
        print(f"(only the first {admin.MAX_POOLS} pools were read: give POOL_ID for the others)", file=op.err)
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
        ("ca", lambda c: admin.as_object(c.get("active")).get("caId")),
        ("expires", lambda c: render.until(admin.as_object(c.get("active")).get("notAfter"), now)),
        ("upstream root", lambda c: bool(admin.as_object(c.get("active")).get("upstream"))),
        ("bundle", lambda c: len(admin.as_list(c.get("bundle")))),
        ("pending request", lambda c: admin.as_object(c.get("pending")).get("caId")),
    ]
    render.print_table(columns, found, op.out)
    return Exit.OK
