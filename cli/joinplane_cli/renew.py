"""`joinplane renew`: a new certificate for the machine in DIR, asked for with its machine token and
a proof of its key (of the new key too, with --rotate-key); the agent service renews through it."""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from joinplane_cli import issuance, render, statedir
from joinplane_cli.api import ApiError, Client
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.keys import MachineKey
from joinplane_cli.refusals import PROOF_REASONS


@dataclass
class RenewOptions:
    url: str | None
    directory: Path
    rotate_key: bool = False
    output: str = "table"
    timeout: float = 30.0
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)


def stored_machine(directory: Path) -> dict[str, Any]:
    """machine.json as an object; {} when it is missing, unreadable or not an object."""
    try:
        machine = json.loads(statedir.read(directory, statedir.MACHINE) or "{}")
    except (ValueError, RecursionError):
        return {}
    return machine if isinstance(machine, dict) else {}


def renew(options: RenewOptions, *, lock_held: bool = False) -> Exit:
    """Renew the certificate in DIR; `lock_held` when the caller (the agent service) holds DIR's lock."""
    directory = options.directory
    try:
        with contextlib.nullcontext() if lock_held else statedir.locked(directory):
            statedir.recover(directory)
            token = (statedir.read(directory, statedir.TOKEN) or "").strip()
            stored_key = statedir.read(directory, statedir.KEY)
            if not token or stored_key is None:
                raise CliError(
                    f"{directory} holds no joined machine (no machine.token); run `joinplane join`",
                    Exit.USAGE,
                )
            machine = stored_machine(directory)
            url = options.url or issuance.text(machine.get("url"))
            if not url:
                raise CliError("no server URL: pass --url or set JOINPLANE_URL", Exit.USAGE)
            try:
                current = MachineKey.load(stored_key.encode())
            except ValueError as bad:
                raise CliError(f"{directory / statedir.KEY}: {bad}", Exit.USAGE) from None
            key = MachineKey.generate() if options.rotate_key else current
            known_id = issuance.text(machine.get("machineId"))
            csr = key.csr(known_id)
            client = Client(url, timeout=options.timeout)
            try:
                # Signed with the current key, also when rotating (the server knows only that one);
                # a new key signs the same proof too, so the rotation proves both are held now.
                response = client.post(
                    "/machines/renew",
                    {"machineToken": token, "csr": csr},
                    proof=lambda raw: current.proof(
                        "renew", token, raw, rotating_to=key if options.rotate_key else None
                    ),
                )
            except ApiError as failed:
                if failed.code == "PERMISSION_DENIED":
                    raise CliError(f"Renewal refused: {failed.server_message}", Exit.DENIED) from None
                if failed.code == "UNAUTHENTICATED" and failed.reason in PROOF_REASONS:
                    raise CliError(
                        f"Renewal refused: the server did not accept this machine's proof of its key: "
                        f"{failed.server_message}",
                        Exit.UNAUTHENTICATED,
                    ) from None
                if failed.code == "UNAUTHENTICATED":
                    raise CliError(
                        "Renewal refused: the machine token is not valid (replaced by a re-join?)",
                        Exit.UNAUTHENTICATED,
                    ) from None
                raise
            problems: list[str] = []
            issued = issuance.checked(response.body, key, problems)
            if not problems and issuance.MACHINE_ID.fullmatch(known_id) and issued.machine_id != known_id:
                problems.append(f"machineId is not {known_id}, the machine in {directory}")
            if problems:
                raise CliError(
                    f"the server's renewal answer is unusable ({'; '.join(problems)}); "
                    f"{directory} was left as it was",
                    Exit.ERROR,
                )
            machine.update(
                machineId=issued.machine_id,
                url=url,
                certificateExpiresAt=issued.expires_at,
                certificateIssuedAt=render.rfc3339(response.now()),
            )
            files: dict[str, str | bytes] = {
                name: (directory / name).read_bytes()
                for name in statedir.OURS
                if (directory / name).is_file()
            }
            files.update(
                {
                    statedir.KEY: key.pem(),
                    statedir.CSR: csr,
                    statedir.CERTIFICATE: issued.certificate,
                    statedir.CA: issued.ca_certificates,
                    statedir.MACHINE: json.dumps(machine, indent=2) + "\n",
                }
            )
            statedir.commit(directory, {n: statedir.content(n, d) for n, d in files.items()})
    except statedir.Busy as busy:
        raise CliError(str(busy), Exit.USAGE) from None
    except OSError as failed:
        raise CliError(f"{directory}: {failed.strerror or failed}", Exit.USAGE) from None
    except UnicodeDecodeError:
        raise CliError(f"{directory}: machine.token or machine.key is not text", Exit.USAGE) from None
    if options.output == "json":
        render.print_json(
            {
                "machineId": issued.machine_id,
                "certificateExpiresAt": issued.expires_at,
                "keyRotated": options.rotate_key,
                "directory": str(directory),
            },
            options.out,
        )
    else:
        print(
            f"Renewed the certificate of {issued.machine_id}: expires {issued.expires_at} "
            f"({render.until(issued.expires_at, response.now())}).",
            file=options.out,
        )
        if options.rotate_key:
            print("  The machine's key was replaced; the old key no longer identifies it.", file=options.out)
    return Exit.OK
