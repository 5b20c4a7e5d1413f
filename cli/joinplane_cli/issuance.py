"""What an admission or a renewal hands the machine (its id, its certificate, the CA certificates),
checked against the machine's key before anything is written to DIR: shared by `join` and `renew`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from joinplane_cli import render
from joinplane_cli.keys import MachineKey, certificate_for, pem_certificates

MACHINE_ID = re.compile(r"mach_[0-9A-Za-z]+")


@dataclass(frozen=True)
class Issued:
    """What an admission or a renewal must hand over before anything is written to DIR."""

    machine_id: str
    certificate: str
    ca_certificates: str
    expires_at: str


def checked(body: dict[str, Any], key: MachineKey, problems: list[str]) -> Issued:
    """Check the certificate part of an answer, adding what is wrong with it to `problems`."""
    machine_id = body.get("machineId")
    if not isinstance(machine_id, str) or not MACHINE_ID.fullmatch(machine_id):
        problems.append("machineId is not a mach_ id")
    expires_at = body.get("certificateExpiresAt")
    try:
        leaf = certificate_for(body.get("certificate"), key)
    except ValueError as wrong:
        problems.append(f"certificate {wrong}")
    else:
        if not isinstance(expires_at, str) or render.parse_time(expires_at) is None:
            expires_at = render.rfc3339(leaf.not_valid_after_utc.timestamp())
    try:
        pem_certificates(body.get("caCertificates"))
    except ValueError:
        problems.append("caCertificates is not PEM certificates")
    return Issued(
        str(machine_id), str(body.get("certificate")), str(body.get("caCertificates")), str(expires_at)
    )


def text(value: Any) -> str:
    """A string field of an answer or of machine.json, or "" when it holds anything else."""
    return value if isinstance(value, str) else ""
