"""Where an option's value comes from, and how it is read: the command line, then the environment, then
the config file's profile; durations in words a person types (`90m`, `1h`, `1d`).

The config file (`~/.config/joinplane/config.toml`, or `$XDG_CONFIG_HOME/joinplane/config.toml`, or
`--config`/`JOINPLANE_CONFIG`) holds one table per profile; `default` is used unless `--profile` or
`JOINPLANE_PROFILE` names another:

    [default]
    url = "http://127.0.0.1:3000"
    api-key = "jpk_..."
    tenant = "dev"

    [prod]
    url = "https://joinplane.example.com"
    api-key-file = "~/.config/joinplane/prod.key"
"""

from __future__ import annotations

import argparse
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from joinplane_cli.api import ApiError
from joinplane_cli.exits import CliError, Exit

# Config keys, each standing in for the option of the same name (and its environment variable).
KEYS = {
    "url": "JOINPLANE_URL",
    "api-key": "JOINPLANE_API_KEY",
    "api-key-file": None,
    "tenant": "JOINPLANE_TENANT",
    "pool": "JOINPLANE_POOL",
    "dir": "JOINPLANE_DIR",
    "token-file": None,
    "output": None,
    "timeout": None,
}

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def seconds(text: str) -> float:
    """`90`, `90s`, `90m`, `1h`, `1h30m`, `1d`, `2w` as seconds; ArgumentTypeError otherwise."""
    spoken = text.strip().lower()
    try:
        value = float(spoken)
    except ValueError:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", spoken)
        if not parts or "".join(n + u for n, u in parts) != spoken:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration (seconds, or a number with s, m, h, d or w: 90m, 1h, 1d)"
            ) from None
        value = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def whole_seconds(text: str) -> int:
    """A duration the API takes in whole seconds (`--ttl 1d` is 86400)."""
    value = seconds(text)
    if value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds")
    return int(value)


def config_path(environ: Mapping[str, str]) -> Path:
    if environ.get("JOINPLANE_CONFIG"):
        return Path(environ["JOINPLANE_CONFIG"]).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "joinplane" / "config.toml"


def load_profile(path: Path, profile: str | None, *, explicit: bool) -> dict[str, str]:
    """The profile's settings from the config file; {} when there is no file and none was asked for.

    A file that cannot be read or parsed, an unknown profile or an unknown key is a usage error: a
    typo in a config file must not silently send commands to another server."""
    import tomllib

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise CliError(f"config file {path} does not exist", Exit.USAGE) from None
        return {}
    except OSError as failed:
        raise CliError(f"config file {path}: {failed.strerror or failed}", Exit.USAGE) from None
    try:
        document = tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as bad:
        raise CliError(f"config file {path} is not TOML: {bad}", Exit.USAGE) from None
    name = profile or "default"
    table = document.get(name)
    if table is None:
        if profile is None:
            return {}
        known = ", ".join(sorted(k for k, v in document.items() if isinstance(v, dict))) or "none"
        raise CliError(f"config file {path} has no profile {name!r} (profiles: {known})", Exit.USAGE)
    if not isinstance(table, dict):
        raise CliError(f"config file {path}: [{name}] is not a table", Exit.USAGE)
    settings: dict[str, str] = {}
    for key, value in table.items():
        key = key.replace("_", "-")
        if key not in KEYS:
            raise CliError(
                f"config file {path}: [{name}] has an unknown key {key!r} (keys: {', '.join(KEYS)})",
                Exit.USAGE,
            )
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise CliError(f"config file {path}: [{name}] {key} must be a string", Exit.USAGE)
        settings[key] = str(value)
    if "timeout" in settings:
        try:
            seconds(settings["timeout"])
        except argparse.ArgumentTypeError as bad:
            raise CliError(f"config file {path}: [{name}] timeout: {bad}", Exit.USAGE) from None
    if settings.get("output", "table") not in ("table", "json"):
        raise CliError(f"config file {path}: [{name}] output must be table or json", Exit.USAGE)
    if "api-key-file" in settings:
        key_file = Path(settings.pop("api-key-file")).expanduser()
        try:
            settings.setdefault("api-key", key_file.read_text().strip())
        except OSError as failed:
            raise CliError(
                f"config file {path}: api-key-file {key_file}: {failed.strerror}", Exit.USAGE
            ) from None
    if "api-key" in settings and "api-key" in {k.replace("_", "-") for k in table}:
        _warn_if_readable(path)
    return settings


def _warn_if_readable(path: Path) -> None:
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        print(
            f"joinplane: warning: {path} holds an API key and other users can read it (chmod 600 {path})",
            file=sys.stderr,
        )


def defaults(profile: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, Any]:
    """Each setting's default for the parser: the environment's value, else the profile's."""
    chosen: dict[str, Any] = {}
    for key, variable in KEYS.items():
        value = environ.get(variable) if variable else None
        chosen[key] = value or profile.get(key)
    return chosen


# --- the API's field names, as the options a person typed ------------------------------------

# Each request field an option sets. A refusal names the field (`ttlSeconds`); the person typed the
# option (`--ttl`), so that is what they read.
OPTION_OF = {
    "ttlSeconds": "--ttl",
    "maxUses": "--max-uses",
    "joinRequestTtlSeconds": "--join-request-ttl",
    "certificateTtlSeconds": "--certificate-ttl",
    "caPropagationSeconds": "--ca-propagation",
    "approvalsRequired": "--approvals-required",
    "workspaceId": "--workspace",
    "name": "--name",
    "siteId": "--site",
    "poolId": "--pool",
    "tenantId": "--tenant",
    "description": "--description",
    "reason": "--reason",
    "requestId": "REQUEST_ID",
    "machineId": "MACHINE_ID",
    "tokenId": "TOKEN_ID",
    "keyId": "KEY_ID",
    "limit": "--limit",
    "cursor": "--cursor",
    "state": "--state",
    "detailType": "--detail-type",
    "grants": "--grant",
    "attestation.discovery": "--discovery",
    "attestation.tpm": "--tpm",
    "attestation.identity": "--identity",
    "bootstrap.controlplaneHttpUrl": "--controlplane-url",
    "bootstrap": "--bootstrap",
    "joinPolicy": "--policy",
    "certificate": "--certificate",
    "chain": "--chain",
}
_DURATIONS = frozenset(
    {"ttlSeconds", "joinRequestTtlSeconds", "certificateTtlSeconds", "caPropagationSeconds"}
)
_BOUND = re.compile(r"Input should be (greater|less) than( or equal to)? (-?\d+)")


def option_of(field: str) -> str:
    """The option (or argument) that set `field`; a field no option sets (inside a --bootstrap file,
    `grants.2`) is named by its nearest ancestor that has one, then the field itself."""
    if field in OPTION_OF:
        return OPTION_OF[field]
    parts = field.split(".")
    for end in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:end])
        if parent in OPTION_OF:
            return f"{OPTION_OF[parent]} ({'.'.join(parts[end:])})"
    return field


def spoken(seconds: int) -> str:
    """A whole number of seconds in the largest unit it is whole in, as the options take them: 1m, 30d."""
    for unit, size in (("w", 7 * 86_400), ("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def reason_for_option(field: str, reason: str) -> str:
    """The server's reason about `field`, its bounds said as the option takes them (`at least 1m`)."""

    def bound(match: re.Match[str]) -> str:
        number = int(match.group(3))
        shown = spoken(number) if field.split(".")[-1] in _DURATIONS else str(number)
        if match.group(2):
            return f"must be at {'least' if match.group(1) == 'greater' else 'most'} {shown}"
        return f"must be {'more' if match.group(1) == 'greater' else 'less'} than {shown}"

    return _BOUND.sub(bound, reason)


def described(failed: ApiError) -> list[str]:
    """What to print of a refusal, one line each: a refused field as the option that set it
    (`--ttl: must be at least 1m`), anything else as the server's `CODE: message`."""
    fields = [d for d in failed.details if isinstance(d, dict) and isinstance(d.get("field"), str)]
    if failed.code != "INVALID_ARGUMENT" or not fields:
        return [failed.message]
    lines = []
    for detail in fields:
        field, reason = detail["field"], str(detail.get("reason", ""))
        headline = f"invalid request: {field}: "
        if len(fields) == 1 and failed.server_message.startswith(headline):
            reason = failed.server_message.removeprefix(headline)  # the fuller of the two
        # A policy's refusal names the rule: `0.when` alone sends a person counting rules in the file.
        rule = f", rule {detail['rule']}" if isinstance(detail.get("rule"), str) else ""
        lines.append(f"{option_of(field)}{rule}: {reason_for_option(field, reason)}")
    return lines
