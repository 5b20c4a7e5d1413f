"""What every command's parser is built from: the options several commands share (`--url`, `-o`,
`--api-key`, paging...) with their defaults, and the small checks their handlers share."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joinplane_cli import options
from joinplane_cli.api import DEFAULT_TIMEOUT
from joinplane_cli.exits import CliError, Exit


def default_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if environ.get("JOINPLANE_DIR"):
        return Path(environ["JOINPLANE_DIR"])
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/joinplane")
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "joinplane"


def need(value: str | None, option: str, variable: str, *, configurable: bool = True) -> str:
    if not value:
        where = f"; or `{option[2:]} = ...` in the config file" if configurable else ""
        raise CliError(f"missing {option} (or set {variable}){where}", Exit.USAGE)
    return value


def duration(text: str) -> float:
    """Seconds or a duration (`90s`, `5m`), finite and not negative."""
    return options.seconds(text)


# --- options shared by subcommands -----------------------------------------------------------


class Defaults:
    """Each option's default: its environment variable, else the config file's profile.

    The options every command shares (`--url`, `-o`, `--profile`, `--api-key`...) are accepted before
    the command as well as after it, as kubectl's and step's are: the top-level parser holds their
    defaults, and each command's copy is `suppressed` (argparse.SUPPRESS), so that a command only sets
    what was typed after it and never overwrites `joinplane -o json pools list`'s `-o json`."""

    def __init__(self, chosen: Mapping[str, Any], *, suppressed: bool = False) -> None:
        self.chosen = chosen
        self.suppressed = suppressed

    def __call__(self, key: str) -> Any:
        return self.chosen.get(key)

    def default(self, value: Any) -> Any:
        return argparse.SUPPRESS if self.suppressed else value


def server_options(d: Defaults) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--url", default=d.default(d("url")), help="the API's base URL (env JOINPLANE_URL)")
    parent.add_argument(
        "--timeout",
        type=duration,
        default=d.default(options.seconds(d("timeout")) if d("timeout") else DEFAULT_TIMEOUT),
        metavar="DURATION",
        help=f"how long to wait for each HTTP answer (default {DEFAULT_TIMEOUT:.0f}s)",
    )
    parent.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default=d.default(d("output") or "table"),
        help="table (for people, the default) or json (for scripts)",
    )
    parent.add_argument(
        "--profile",
        default=d.default(None),
        help="the config file's profile to use (env JOINPLANE_PROFILE)",
    )
    parent.add_argument(
        "--config", default=d.default(None), metavar="FILE", help="the config file (env JOINPLANE_CONFIG)"
    )
    return parent


def operator_options(d: Defaults) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--api-key", default=d.default(d("api-key")), help="operator API key jpk_... (env JOINPLANE_API_KEY)"
    )
    parent.add_argument(
        "--tenant",
        default=d.default(d("tenant")),
        help="tenant id (env JOINPLANE_TENANT); default: the API key's own tenant",
    )
    parent.add_argument("--pool", default=d.default(d("pool")), help="pool id (env JOINPLANE_POOL)")
    return parent


def paging_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--limit", type=int, help="items per page (server default 100, at most 200)")
    parent.add_argument("--cursor", help="continue after this id (a previous page's nextCursor)")
    parent.add_argument("--all", action="store_true", dest="every", help="follow cursors through every page")
    parent.add_argument(
        "-q", "--quiet", action="store_true", help="print only the ids, one per line (e.g. for $(...))"
    )
    return parent


def pool_id_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pool_id", metavar="POOL_ID", nargs="?", help="the pool (default: --pool)")


@dataclass
class Parents:
    """What every command's parser is built from: the subcommands it joins, the option groups its
    options come from, and the defaults."""

    commands: Any  # argparse's _SubParsersAction
    d: Defaults
    server: argparse.ArgumentParser
    operator: argparse.ArgumentParser
    paging: argparse.ArgumentParser
    default_directory: str
