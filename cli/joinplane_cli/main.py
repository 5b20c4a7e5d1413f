"""`joinplane`: the machine agent (`join`, `renew`, `agent`) and the operator's tool (`requests`,
`tokens`, `pools`, `machines`, `apikeys`, `audit`, `ca`), over the HTTP API only: a local runtime and
a deployed stage alike.

Every failure ends in one plain line on stderr and an exit code from `exits.Exit`; a traceback
means a bug in the CLI, never a refused request or an unreachable server.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from joinplane_cli import admin_commands, agent_commands, completion, options, tpm_commands
from joinplane_cli.api import ApiError
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.shared_options import (
    Defaults,
    Parents,
    default_dir,
    operator_options,
    paging_options,
    server_options,
)
from joinplane_cli.version import VERSION

# Each command's parser is built here at every start (help and completion need them all), from
# `agent_commands` (the machine's), `admin_commands` (the operator's) and `tpm_commands`; the module
# that does a command's work (`agent`, `renew`, `service`, `admin_pools`...) is imported by its
# handler only when it runs: `--version`, `--help` and completion never load `cryptography` or the
# agent (docs/decisions.md, "The CLI's parser").

EPILOG = """\
exit codes: 0 ok/admitted, 1 error, 2 usage, 3 pending, 4 rejected, 5 expired,
            6 denied or revoked, 7 server unreachable, 8 bad token or API key,
            9 TPM unusable (--tpm), 10 TPM activation refused, 130 interrupted
settings:   an option, else its environment variable (JOINPLANE_URL, JOINPLANE_API_KEY,
            JOINPLANE_TENANT, JOINPLANE_POOL, JOINPLANE_TOKEN, JOINPLANE_TOKEN_ID, JOINPLANE_DIR),
            else the profile of ~/.config/joinplane/config.toml (--profile, JOINPLANE_PROFILE;
            default [default]).
durations:  seconds, or 90s, 90m, 1h, 1h30m, 1d, 2w.
shared:     --url, --timeout, -o, --profile, --config, --api-key, --tenant and --pool may stand
            before COMMAND as well as after it (after it wins).
"""


def _completion(args: argparse.Namespace) -> Exit:
    print(completion.script(args.shell, build_parser()), end="")
    return Exit.OK


def _tpm_command(p: Parents) -> None:
    tpm_commands.add_parser(p.commands, p.server, p.operator, admin_commands.connect)


def _completion_command(p: Parents) -> None:
    commands = p.commands
    shells = commands.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print a completion script: `source <(joinplane completion bash)`, or see docs/cli.md.",
    )
    shells.add_argument("shell", choices=completion.SHELLS, help="the shell to complete in")
    shells.set_defaults(handler=_completion)


COMMANDS = (
    agent_commands.join_command,
    agent_commands.agent_command,
    agent_commands.renew_command,
    admin_commands.requests_command,
    admin_commands.tokens_command,
    admin_commands.pools_command,
    admin_commands.machines_command,
    admin_commands.apikeys_command,
    admin_commands.ca_command,
    admin_commands.audit_command,
    _tpm_command,
    _completion_command,
)


def build_parser(chosen: Mapping[str, Any] | None = None) -> argparse.ArgumentParser:
    """The parser; `chosen` are the option defaults from the environment and the config file."""
    chosen = options.defaults({}, os.environ) if chosen is None else chosen
    top, d = Defaults(chosen), Defaults(chosen, suppressed=True)
    parser = argparse.ArgumentParser(
        prog="joinplane",
        description="Join machines to Joinplane pools, keep their certificates fresh, decide their joins.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[server_options(top), operator_options(top)],
    )
    parser.add_argument("--version", action="version", version=f"joinplane {VERSION}")
    parser.set_defaults(url_from=chosen.get("url-from") or "--url")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    default_directory = str(Path(d("dir")).expanduser()) if d("dir") else str(default_dir())
    parents = Parents(
        commands,
        d,
        server_options(d),
        operator_options(d),
        paging_options(),
        default_directory,
    )
    for add in COMMANDS:
        add(parents)
    return parser


def _terminate(signum: int, frame: FrameType | None) -> None:
    # systemd stops a `join --wait` with SIGTERM: leave as cleanly as after Ctrl-C.
    raise KeyboardInterrupt


def _settings(argv: Sequence[str]) -> dict[str, Any]:
    """The option defaults: the environment's, else the config file profile's (--profile/--config are
    read first, wherever they stand)."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--profile")
    early.add_argument("--config")
    early.add_argument("--url")
    known, _ = early.parse_known_args(argv)
    path = Path(known.config).expanduser() if known.config else options.config_path(os.environ)
    profile = known.profile or os.environ.get("JOINPLANE_PROFILE") or None
    loaded = options.load_profile(path, profile, explicit=bool(known.config))
    chosen = options.defaults(loaded, os.environ)
    if known.url:
        chosen["url-from"] = "--url"
    elif os.environ.get("JOINPLANE_URL"):
        chosen["url-from"] = "JOINPLANE_URL"
    elif loaded.get("url"):
        chosen["url-from"] = f"url of [{profile or 'default'}] in {path}"
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        chosen = _settings(arguments)
    except CliError as failed:
        print(f"joinplane: {failed.message}", file=sys.stderr)
        return int(failed.exit_code)
    args = build_parser(chosen).parse_args(arguments)
    previous: Callable[[int, FrameType | None], Any] | int | None = None
    with contextlib.suppress(ValueError):  # not the main thread (an embedding test): leave signals alone
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.handler(args))
    except ApiError as failed:
        for line in options.described(failed):
            print(f"joinplane: {line}", file=sys.stderr)
        return int(failed.exit_code)
    except CliError as failed:
        print(f"joinplane: {failed.message}", file=sys.stderr)
        return int(failed.exit_code)
    except KeyboardInterrupt:
        print("\njoinplane: interrupted", file=sys.stderr)
        return int(Exit.INTERRUPTED)
    except BrokenPipeError:
        # `joinplane ... | head`: the reader left; nothing else to say.
        sys.stderr.close()
        return int(Exit.ERROR)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
