"""`joinplane tokens`: a pool's or a site's join tokens: create (the secret shown once, or
written to a file only its owner reads), list, revoke."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from joinplane_cli import admin, render
from joinplane_cli.admin import Operator
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.render import Column


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
    attestation = {k: v for k, v in chosen if v}
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
    admin.one_pool_cursor(pool, site, cursor)
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
