"""`joinplane`: the machine agent (`join`, `renew`) and the operator's tool (`requests`, `tokens`,
`pools`, `machines`, `audit`), over the HTTP API only: a local runtime and a deployed stage alike.

Every failure ends in one plain line on stderr and an exit code from `exits.Exit`; a traceback
means a bug in the CLI, never a refused request or an unreachable server.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from joinplane_cli import admin, agent, service
from joinplane_cli.api import DEFAULT_TIMEOUT, ApiError, Client
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.version import VERSION

EPILOG = """\
exit codes: 0 ok/admitted, 1 error, 2 usage, 3 pending, 4 rejected, 5 expired,
            6 denied or revoked, 7 server unreachable, 8 bad token or API key, 130 interrupted
environment: JOINPLANE_URL, JOINPLANE_TOKEN, JOINPLANE_DIR, JOINPLANE_API_KEY, JOINPLANE_TENANT,
             JOINPLANE_POOL stand in for the options of the same name.
"""


def default_dir() -> Path:
    if os.environ.get("JOINPLANE_DIR"):
        return Path(os.environ["JOINPLANE_DIR"])
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/joinplane")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "joinplane"


def _need(value: str | None, option: str, variable: str) -> str:
    if not value:
        raise CliError(f"missing {option} (or set {variable})", Exit.USAGE)
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


# --- options shared by subcommands -----------------------------------------------------------


def _server_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--url", default=os.environ.get("JOINPLANE_URL"), help="the API's base URL (env JOINPLANE_URL)"
    )
    parent.add_argument(
        "--timeout",
        type=_positive,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for each HTTP answer (default {DEFAULT_TIMEOUT:.0f})",
    )
    parent.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="table (for people, the default) or json (for scripts)",
    )
    return parent


def _operator_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--api-key",
        default=os.environ.get("JOINPLANE_API_KEY"),
        help="operator API key jpk_... (env JOINPLANE_API_KEY)",
    )
    parent.add_argument(
        "--tenant", default=os.environ.get("JOINPLANE_TENANT"), help="tenant id (env JOINPLANE_TENANT)"
    )
    parent.add_argument(
        "--pool", default=os.environ.get("JOINPLANE_POOL"), help="pool id (env JOINPLANE_POOL)"
    )
    return parent


def _paging_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--limit", type=int, help="items per page (server default 100, at most 200)")
    parent.add_argument("--cursor", help="continue after this id (a previous page's nextCursor)")
    parent.add_argument("--all", action="store_true", dest="every", help="follow cursors through every page")
    return parent


def _operator(args: argparse.Namespace) -> admin.Operator:
    url = _need(args.url, "--url", "JOINPLANE_URL")
    key = _need(args.api_key, "--api-key", "JOINPLANE_API_KEY")
    tenant = _need(args.tenant, "--tenant", "JOINPLANE_TENANT")
    return admin.Operator(Client(url, api_key=key, timeout=args.timeout), tenant, args.output)


def _pool(args: argparse.Namespace) -> str:
    return _need(args.pool, "--pool", "JOINPLANE_POOL")


# --- handlers --------------------------------------------------------------------------------


def _token(args: argparse.Namespace) -> str | None:
    token: str | None = args.token
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as failed:
            raise CliError(f"--token-file: {failed.strerror or failed}", Exit.USAGE) from None
    return token


def _join(args: argparse.Namespace) -> Exit:
    token = _token(args)
    options = agent.JoinOptions(
        url=_need(args.url, "--url", "JOINPLANE_URL"),
        token=_need(token, "--token", "JOINPLANE_TOKEN"),
        directory=Path(args.dir).absolute(),
        wait=args.wait,
        dry_run=args.dry_run,
        poll_interval=args.poll_interval,
        max_wait=args.max_wait,
        new_key=args.new_key,
        rejoin=args.rejoin,
        output=args.output,
        timeout=args.timeout,
    )
    return agent.Agent(options).join()


def _agent(args: argparse.Namespace) -> Exit:
    options = service.ServiceOptions(
        url=args.url,
        token=None if args.print_systemd_unit else _token(args),
        directory=Path(args.dir).absolute(),
        on_renew=args.on_renew,
        output=args.output,
        timeout=args.timeout,
    )
    if args.print_systemd_unit:
        token_file = str(Path(args.token_file).absolute()) if args.token_file else None
        return service.print_unit(options, token_file)
    return service.serve(options)


def _renew(args: argparse.Namespace) -> Exit:
    return agent.renew(
        agent.RenewOptions(
            url=args.url,
            directory=Path(args.dir).absolute(),
            rotate_key=args.rotate_key,
            output=args.output,
            timeout=args.timeout,
        )
    )


def _requests(args: argparse.Namespace) -> Exit:
    op = _operator(args)
    if args.action == "list":
        return admin.requests_list(op, _pool(args), args.state, args.limit, args.cursor, args.every)
    ttl = getattr(args, "ttl", None)
    return admin.requests_decide(op, args.action, _pool(args), args.request_id, args.reason, ttl)


def _tokens(args: argparse.Namespace) -> Exit:
    op = _operator(args)
    if args.action == "revoke":
        return admin.tokens_revoke(op, args.token_id)
    pool = None if args.site else _pool(args)
    if args.action == "list":
        return admin.tokens_list(op, pool, args.site, args.limit, args.cursor, args.every)
    return admin.tokens_create(
        op,
        pool,
        args.site,
        args.ttl,
        args.max_uses,
        args.require_approval,
        args.discovery,
        args.tpm,
        args.description,
        args.identity,
    )


def _pools(args: argparse.Namespace) -> Exit:
    op = _operator(args)
    if args.action == "list":
        return admin.pools_list(op, args.site, args.state, args.limit, args.cursor, args.every)
    pool = args.pool_id or _pool(args)
    if args.action == "create":
        site = _need(args.site, "--site", "a site id")
        return admin.pools_create(
            op, pool, site, args.name, args.workspace, args.join_request_ttl, args.certificate_ttl
        )
    if args.action == "get":
        return admin.pools_get(op, pool)
    return admin.pools_archive(op, pool)


def _machines(args: argparse.Namespace) -> Exit:
    op = _operator(args)
    if args.action == "list":
        return admin.machines_list(op, _pool(args), args.state, args.limit, args.cursor, args.every)
    return admin.machines_revoke(op, args.machine_id, args.reason)


def _ca(args: argparse.Namespace) -> Exit:
    op = _operator(args)
    pool = args.pool_id or _pool(args)
    if args.action == "get":
        return admin.ca_get(op, pool, args.bundle_out)
    return admin.ca_rotate(op, pool, args.bundle_out)


def _audit(args: argparse.Namespace) -> Exit:
    return admin.audit_list(_operator(args), args.pool, args.detail_type, args.limit, args.cursor, args.every)


# --- the parser ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    server, operator, paging = _server_options(), _operator_options(), _paging_options()
    parser = argparse.ArgumentParser(
        prog="joinplane",
        description="Join machines to Joinplane pools, and decide their joins.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"joinplane {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    join = commands.add_parser(
        "join",
        parents=[server],
        help="join this machine to a pool",
        description="Ask to join this machine; with --wait, wait for an operator.",
    )
    join.add_argument(
        "--token", default=os.environ.get("JOINPLANE_TOKEN"), help="join token jpt_... (env JOINPLANE_TOKEN)"
    )
    join.add_argument("--token-file", help="read the join token from this file (keeps it out of `ps`)")
    join.add_argument(
        "--dir",
        default=str(default_dir()),
        help="where the key and identity live (env JOINPLANE_DIR; default %(default)s)",
    )
    join.add_argument("--wait", action="store_true", help="when deferred, keep asking until decided")
    join.add_argument("--dry-run", action="store_true", help="ask for the verdict only; nothing is recorded")
    join.add_argument(
        "--poll-interval",
        type=_positive,
        metavar="SECONDS",
        help="seconds between retries while waiting (default: the server's retryAfterSeconds)",
    )
    join.add_argument(
        "--max-wait",
        type=_positive,
        metavar="SECONDS",
        help="stop waiting after this long (exit 3); default: until decided or expired",
    )
    join.add_argument(
        "--new-key",
        action="store_true",
        help="make a new key even if DIR has one (after a rejection or expiry)",
    )
    join.add_argument("--rejoin", action="store_true", help="join again although DIR holds an identity")
    join.set_defaults(handler=_join)

    service_mode = commands.add_parser(
        "agent",
        parents=[server],
        help="run as a service: join if needed, then renew the certificate before it expires",
        description=(
            "Join if DIR holds no identity (waiting for approval), then renew at about two thirds of "
            "the certificate's lifetime; an unreachable or failing server is retried with backoff. "
            "Runs until SIGTERM."
        ),
    )
    service_mode.add_argument(
        "--token", default=os.environ.get("JOINPLANE_TOKEN"), help="join token jpt_..., for the first join"
    )
    service_mode.add_argument(
        "--token-file", help="read the join token from this file (keeps it out of `ps`)"
    )
    service_mode.add_argument(
        "--dir",
        default=str(default_dir()),
        help="where the key and identity live (env JOINPLANE_DIR; default %(default)s)",
    )
    service_mode.add_argument(
        "--on-renew",
        metavar="CMD",
        help="shell command run in DIR after each join and renewal, e.g. 'systemctl reload nginx'",
    )
    service_mode.add_argument(
        "--print-systemd-unit",
        action="store_true",
        help="print a systemd unit running this agent with these options, and exit",
    )
    service_mode.set_defaults(handler=_agent)

    renew = commands.add_parser(
        "renew",
        parents=[server],
        help="renew this machine's certificate",
        description="Renew the certificate in DIR with the machine token.",
    )
    renew.add_argument("--dir", default=str(default_dir()), help="the joined machine's directory")
    renew.add_argument("--rotate-key", action="store_true", help="replace the machine's key as well")
    renew.set_defaults(handler=_renew)

    requests = commands.add_parser("requests", help="the join-request queue (list, approve, reject)")
    actions = requests.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list join requests")
    listing.add_argument(
        "--state",
        default="pending",
        choices=("pending", "approved", "rejected", "expired", "consumed", "all"),
    )
    approve = actions.add_parser("approve", parents=[server, operator], help="approve a pending request")
    approve.add_argument("request_id", metavar="REQUEST_ID")
    approve.add_argument(
        "--ttl",
        type=int,
        metavar="SECONDS",
        help="how long the machine has to use the approval (server default 3600)",
    )
    approve.add_argument("--reason", help="recorded with the decision")
    reject = actions.add_parser("reject", parents=[server, operator], help="reject a request")
    reject.add_argument("request_id", metavar="REQUEST_ID")
    reject.add_argument("--reason", help="shown to the machine and recorded")
    requests.set_defaults(handler=_requests)

    tokens = commands.add_parser("tokens", help="join tokens (create, list, revoke)")
    actions = tokens.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[server, operator], help="create a join token")
    create.add_argument("--site", help="a site token (joins wait for a pool to claim them) instead of --pool")
    create.add_argument("--ttl", type=int, metavar="SECONDS", help="lifetime (server default 86400)")
    create.add_argument("--max-uses", type=int, help="machines that may use it (server default 1)")
    create.add_argument("--require-approval", action="store_true", help="every join waits for an operator")
    create.add_argument("--discovery", choices=("off", "defer-unknown"))
    create.add_argument("--tpm", choices=("off", "defer-unlisted", "require"))
    create.add_argument(
        "--identity",
        choices=("any", "key"),
        help="key: refuse fingerprint-only joins (every machine must send a CSR)",
    )
    create.add_argument("--description")
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list join tokens")
    listing.add_argument("--site", help="a site's tokens instead of --pool's")
    revoke = actions.add_parser("revoke", parents=[server, operator], help="revoke a join token")
    revoke.add_argument("token_id", metavar="TOKEN_ID")
    tokens.set_defaults(handler=_tokens)

    pools = commands.add_parser("pools", help="compute pools (create, list, get, archive)")
    actions = pools.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[server, operator], help="create a pool")
    create.add_argument("pool_id", metavar="POOL_ID", nargs="?", help="default: --pool")
    create.add_argument("--site", help="the site the pool belongs to (required)")
    create.add_argument("--name", help="display name (default: the pool id)")
    create.add_argument("--workspace", help="workspace id handed to machines (default: the pool id)")
    create.add_argument(
        "--join-request-ttl",
        type=int,
        metavar="SECONDS",
        help="how long a deferred join waits for a decision (server default 86400)",
    )
    create.add_argument(
        "--certificate-ttl",
        type=int,
        metavar="SECONDS",
        help="machine certificate lifetime (server default 86400)",
    )
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list pools")
    listing.add_argument("--site")
    listing.add_argument("--state", choices=("active", "archived", "all"))
    for name, text in (("get", "show a pool"), ("archive", "archive a pool: no new joins or tokens")):
        one = actions.add_parser(name, parents=[server, operator], help=text)
        one.add_argument("pool_id", metavar="POOL_ID", nargs="?", help="default: --pool")
    pools.set_defaults(handler=_pools)

    machines = commands.add_parser("machines", help="joined machines (list, revoke)")
    actions = machines.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list a pool's machines")
    listing.add_argument("--state", choices=("active", "revoked", "all"))
    revoke = actions.add_parser("revoke", parents=[server, operator], help="revoke a machine")
    revoke.add_argument("machine_id", metavar="MACHINE_ID")
    revoke.add_argument("--reason")
    machines.set_defaults(handler=_machines)

    authorities = commands.add_parser("ca", help="a pool's certificate authority (get, rotate)")
    actions = authorities.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (
        ("get", "show the pool's active CA (made on first use) and its trust bundle"),
        ("rotate", "make a new CA key; the previous CA stays trusted until its certificates expire"),
    ):
        one = actions.add_parser(name, parents=[server, operator], help=text)
        one.add_argument("pool_id", metavar="POOL_ID", nargs="?", help="default: --pool")
        one.add_argument(
            "--bundle-out", metavar="FILE", help="write the bundle (PEM) to FILE, for openssl verify -CAfile"
        )
    authorities.set_defaults(handler=_ca)

    audit = commands.add_parser("audit", help="security events (list)")
    actions = audit.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list events, newest first")
    listing.add_argument(
        "--detail-type", help="e.g. join-request.approved (the security. prefix is optional)"
    )
    audit.set_defaults(handler=_audit)
    return parser


def _terminate(signum: int, frame: FrameType | None) -> None:
    # systemd stops an agent with SIGTERM: leave as cleanly as after Ctrl-C.
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous: Callable[[int, FrameType | None], Any] | int | None = None
    with contextlib.suppress(ValueError):  # not the main thread (an embedding test): leave signals alone
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.handler(args))
    except ApiError as failed:
        print(f"joinplane: {failed.message}", file=sys.stderr)
        # One field error is the message already; several are listed one per line.
        for detail in failed.details if len(failed.details) > 1 else []:
            if isinstance(detail, dict) and "field" in detail:
                print(f"  {detail.get('field')}: {detail.get('reason', '')}", file=sys.stderr)
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
