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
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from joinplane_cli import completion, options, tpm_commands
from joinplane_cli.api import DEFAULT_TIMEOUT, OPERATOR_RETRY, ApiError, Client
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.version import VERSION

if TYPE_CHECKING:
    from joinplane_cli import admin

# The commands' own modules (admin, agent, service) are imported by their handlers: `--version`,
# `--help` and completion never load `cryptography` or the agent (docs/decisions.md, "The CLI's parser").

EPILOG = """\
exit codes: 0 ok/admitted, 1 error, 2 usage, 3 pending, 4 rejected, 5 expired,
            6 denied or revoked, 7 server unreachable, 8 bad token or API key,
            9 TPM unusable (--tpm), 10 TPM activation refused, 130 interrupted
settings:   an option, else its environment variable (JOINPLANE_URL, JOINPLANE_API_KEY,
            JOINPLANE_TENANT, JOINPLANE_POOL, JOINPLANE_TOKEN, JOINPLANE_DIR), else the profile of
            ~/.config/joinplane/config.toml (--profile, JOINPLANE_PROFILE; default [default]).
durations:  seconds, or 90s, 90m, 1h, 1h30m, 1d, 2w.
shared:     --url, --timeout, -o, --profile, --config, --api-key, --tenant and --pool may stand
            before COMMAND as well as after it (after it wins).
"""


def default_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if environ.get("JOINPLANE_DIR"):
        return Path(environ["JOINPLANE_DIR"])
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/joinplane")
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "joinplane"


def _need(value: str | None, option: str, variable: str, *, configurable: bool = True) -> str:
    if not value:
        where = f"; or `{option[2:]} = ...` in the config file" if configurable else ""
        raise CliError(f"missing {option} (or set {variable}){where}", Exit.USAGE)
    return value


def _positive(text: str) -> float:
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


def _server_options(d: Defaults) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--url", default=d.default(d("url")), help="the API's base URL (env JOINPLANE_URL)")
    parent.add_argument(
        "--timeout",
        type=_positive,
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


def _operator_options(d: Defaults) -> argparse.ArgumentParser:
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


def _paging_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--limit", type=int, help="items per page (server default 100, at most 200)")
    parent.add_argument("--cursor", help="continue after this id (a previous page's nextCursor)")
    parent.add_argument("--all", action="store_true", dest="every", help="follow cursors through every page")
    parent.add_argument(
        "-q", "--quiet", action="store_true", help="print only the ids, one per line (e.g. for $(...))"
    )
    return parent


def _api_key(args: argparse.Namespace) -> str:
    key = _need(args.api_key, "--api-key", "JOINPLANE_API_KEY")
    if key.startswith(("jpt_", "jpm_")):
        kind = "a join token" if key.startswith("jpt_") else "a machine token"
        raise CliError(
            f"--api-key is {kind} ({key[:4]}...), not an API key: operator commands take an API key "
            "jpk_... (`joinplane apikeys create`, or the one `make run` prints)",
            Exit.USAGE,
        )
    return key


def _operator(args: argparse.Namespace) -> admin.Operator:
    from joinplane_cli import admin

    url = _need(args.url, "--url", "JOINPLANE_URL")
    client = Client(
        url, api_key=_api_key(args), timeout=args.timeout, retry=OPERATOR_RETRY, url_from=args.url_from
    )
    tenant = args.tenant or admin.whoami_tenant(client)
    return admin.Operator(client, tenant, args.output, quiet=getattr(args, "quiet", False))


def _pool(args: argparse.Namespace) -> str:
    return _need(args.pool, "--pool", "JOINPLANE_POOL")


# --- handlers --------------------------------------------------------------------------------


def _token(args: argparse.Namespace) -> str | None:
    token: str | None = args.token
    if args.token_file:
        try:
            token = Path(args.token_file).expanduser().read_text().strip()
        except OSError as failed:
            raise CliError(f"--token-file: {failed.strerror or failed}", Exit.USAGE) from None
    if token and token.startswith(("jpk_", "jpm_")):
        kind = "an API key" if token.startswith("jpk_") else "a machine token"
        raise CliError(
            f"the join token is {kind} ({token[:4]}...), not a join token: a machine joins with a join "
            "token jpt_... (`joinplane tokens create --pool POOL` prints one)",
            Exit.USAGE,
        )
    return token


def _token_id(args: argparse.Namespace) -> str:
    """`--aws-iam`'s token, named by its id: a join token's secret is then neither needed nor sent."""
    if not args.aws_iam:
        if args.token_id:
            raise CliError("--token-id names the token of an --aws-iam join; add --aws-iam", Exit.USAGE)
        return ""
    if args.token or args.token_file:
        raise CliError("--aws-iam joins with no secret: give --token-id jtok_..., not --token", Exit.USAGE)
    token_id = _need(args.token_id, "--token-id", "JOINPLANE_TOKEN_ID", configurable=False)
    if not token_id.startswith("jtok_"):
        raise CliError(f"--token-id must be a join token's id, jtok_... (got {token_id[:5]}...)", Exit.USAGE)
    return token_id


def _join(args: argparse.Namespace) -> Exit:
    from joinplane_cli import agent

    token_id = _token_id(args)
    token = "" if token_id else _need(_token(args), "--token", "JOINPLANE_TOKEN", configurable=False)
    join_options = agent.JoinOptions(
        url=_need(args.url, "--url", "JOINPLANE_URL"),
        token=token,
        aws_iam=args.aws_iam,
        token_id=token_id,
        directory=Path(args.dir).absolute(),
        wait=args.wait,
        dry_run=args.dry_run,
        poll_interval=args.poll_interval,
        max_wait=args.max_wait,
        new_key=args.new_key,
        rejoin=args.rejoin,
        output=args.output,
        timeout=args.timeout,
        tpm=args.tpm,
        tpm_ek=args.tpm_ek,
    )
    return agent.Agent(join_options).join()


def _agent(args: argparse.Namespace) -> Exit:
    from joinplane_cli import service

    token_id = _token_id(args)
    service_options = service.ServiceOptions(
        url=args.url,
        token=None if args.print_systemd_unit or token_id else _token(args),
        aws_iam=args.aws_iam,
        token_id=token_id,
        directory=Path(args.dir).absolute(),
        on_renew=args.on_renew,
        output=args.output,
        timeout=args.timeout,
        tpm=args.tpm,
        tpm_ek=args.tpm_ek,
    )
    if args.print_systemd_unit:
        token_file = str(Path(args.token_file).absolute()) if args.token_file else None
        return service.print_unit(service_options, token_file)
    return service.serve(service_options)


def _renew(args: argparse.Namespace) -> Exit:
    from joinplane_cli import agent

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
    from joinplane_cli import admin

    op = _operator(args)
    if args.action == "list" and args.watch:
        return admin.requests_watch(op, args.pool, args.state, args.interval)
    if args.action == "list":
        return admin.requests_list(op, args.pool, args.state, args.limit, args.cursor, args.every)
    if args.action == "get":
        return admin.requests_get(op, args.pool, args.request_id)
    ttl = getattr(args, "ttl", None)
    return admin.requests_decide_each(op, args.action, args.pool, args.request_id, args.reason, ttl)


def _tokens(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin

    op = _operator(args)
    if args.action == "revoke":
        return admin.tokens_revoke(op, args.token_id)
    if args.action == "list":  # neither --pool nor --site: every pool the key sees
        return admin.tokens_list(op, args.pool, args.site, args.limit, args.cursor, args.every)
    pool = None if args.site else _pool(args)
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
        args.token_out,
        args.tpm_trust,
        args.tpm_rejoin,
        {"accounts": args.aws_account or [], "arns": args.aws_arn or []}
        if args.aws_account or args.aws_arn
        else None,
    )


def _pools(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin

    op = _operator(args)
    if args.action == "list":
        return admin.pools_list(op, args.site, args.state, args.limit, args.cursor, args.every)
    pool = args.pool_id or _pool(args)
    bootstrap = admin.read_bootstrap(
        getattr(args, "bootstrap", None), getattr(args, "controlplane_url", None)
    )
    if args.action == "create":
        site = _need(args.site, "--site", "a site id", configurable=False)
        return admin.pools_create(
            op,
            pool,
            site,
            args.name,
            args.workspace,
            args.join_request_ttl,
            args.certificate_ttl,
            args.ca_propagation,
            bootstrap,
        )
    if args.action == "update":
        return admin.pools_update(
            op,
            pool,
            args.name,
            args.workspace,
            args.join_request_ttl,
            args.certificate_ttl,
            args.ca_propagation,
            bootstrap,
        )
    if args.action == "get":
        return admin.pools_get(op, pool)
    return admin.pools_archive(op, pool)


def _machines(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin

    op = _operator(args)
    if args.action == "list":
        return admin.machines_list(op, args.pool, args.state, args.limit, args.cursor, args.every)
    if args.action == "get":
        return admin.machines_get(op, args.machine_id)
    return admin.machines_revoke(op, args.machine_id, args.reason)


def _apikeys(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin

    op = _operator(args)
    if args.action == "create":
        return admin.apikeys_create(op, args.grant, args.description)
    if args.action == "list":
        return admin.apikeys_list(op, args.limit, args.cursor, args.every)
    if args.action == "whoami":
        return admin.apikeys_whoami(op)
    return admin.apikeys_revoke(op, args.key_id)


def _ca(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin

    op = _operator(args)
    if args.action == "get" and not (args.pool_id or args.pool):
        return admin.ca_get_across(op, args.bundle_out)  # every active pool the key sees
    pool = args.pool_id or _pool(args)
    if args.action == "get":
        return admin.ca_get(op, pool, args.bundle_out)
    if args.action == "rotate":
        return admin.ca_rotate(op, pool, args.bundle_out, args.emergency)
    if args.action == "activate":
        return admin.ca_activate(op, pool, args.ca_id, args.bundle_out)
    if args.action == "create-csr":
        return admin.ca_create_csr(op, pool, args.out)
    return admin.ca_import(op, pool, args.certificate, args.chain, args.bundle_out)


def _audit(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin

    return admin.audit_list(_operator(args), args.pool, args.detail_type, args.limit, args.cursor, args.every)


def _completion(args: argparse.Namespace) -> Exit:
    print(completion.script(args.shell, build_parser()), end="")
    return Exit.OK


# --- the parser ------------------------------------------------------------------------------


def _pool_id_argument(parser: argparse.ArgumentParser) -> None:
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


def _aws_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--aws-iam",
        action="store_true",
        help="join with this machine's AWS IAM identity instead of a token secret (docs/aws.md; "
        "needs pip install 'joinplane-cli[aws]')",
    )
    parser.add_argument(
        "--token-id",
        default=os.environ.get("JOINPLANE_TOKEN_ID"),
        metavar="jtok_...",
        help="with --aws-iam: the join token's id, not a secret (env JOINPLANE_TOKEN_ID)",
    )


def _join_command(p: Parents) -> None:
    commands, server, d, default_directory = p.commands, p.server, p.d, p.default_directory
    join = commands.add_parser(
        "join",
        parents=[server],
        help="join this machine to a pool",
        description="Ask to join this machine; with --wait, wait for an operator.",
    )
    join.add_argument(
        "--token", default=os.environ.get("JOINPLANE_TOKEN"), help="join token jpt_... (env JOINPLANE_TOKEN)"
    )
    join.add_argument(
        "--token-file",
        default=d("token-file"),
        metavar="FILE",
        help="read the join token from FILE (keeps it out of `ps`)",
    )
    join.add_argument(
        "--dir",
        default=default_directory,
        help="where the key and identity live (env JOINPLANE_DIR; default %(default)s)",
    )
    join.add_argument("--wait", action="store_true", help="when deferred, keep asking until decided")
    join.add_argument("--dry-run", action="store_true", help="ask for the verdict only; nothing is recorded")
    join.add_argument(
        "--poll-interval",
        type=_positive,
        metavar="DURATION",
        help="time between retries while waiting (default: the server's retryAfterSeconds)",
    )
    join.add_argument(
        "--max-wait",
        type=_positive,
        metavar="DURATION",
        help="stop waiting after this long (exit 3); default: until decided or expired",
    )
    join.add_argument(
        "--new-key",
        action="store_true",
        help="make a new key even if DIR has one (after a rejection or expiry)",
    )
    join.add_argument("--rejoin", action="store_true", help="join again although DIR holds an identity")
    tpm_commands.join_options(join)
    _aws_options(join)
    join.set_defaults(handler=_join)


def _agent_command(p: Parents) -> None:
    commands, server, d, default_directory = p.commands, p.server, p.d, p.default_directory
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
        "--token-file", default=d("token-file"), metavar="FILE", help="read the join token from FILE"
    )
    service_mode.add_argument(
        "--dir",
        default=default_directory,
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
    tpm_commands.join_options(service_mode)
    _aws_options(service_mode)
    service_mode.set_defaults(handler=_agent)


def _renew_command(p: Parents) -> None:
    commands, server, default_directory = p.commands, p.server, p.default_directory
    renew = commands.add_parser(
        "renew",
        parents=[server],
        help="renew this machine's certificate",
        description="Renew the certificate in DIR with the machine token.",
    )
    renew.add_argument(
        "--dir", default=default_directory, help="the joined machine's directory (default %(default)s)"
    )
    renew.add_argument("--rotate-key", action="store_true", help="replace the machine's key as well")
    renew.set_defaults(handler=_renew)


def _requests_command(p: Parents) -> None:
    commands, server, operator, paging = p.commands, p.server, p.operator, p.paging
    requests = commands.add_parser("requests", help="the join-request queue (list, get, approve, reject)")
    actions = requests.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list",
        parents=[server, operator, paging],
        help="list join requests (of --pool, or of every pool the key sees)",
    )
    listing.add_argument(
        "--state",
        default="pending",
        choices=("pending", "approved", "rejected", "expired", "consumed", "all"),
        help="which requests (default pending)",
    )
    listing.add_argument(
        "-w", "--watch", action="store_true", help="after the list, show each change to it until Ctrl-C"
    )
    listing.add_argument(
        "--interval",
        type=_positive,
        default=5.0,
        metavar="DURATION",
        help="with --watch: how often the queue is read (default 5s)",
    )
    one = actions.add_parser("get", parents=[server, operator], help="show one join request")
    one.add_argument("request_id", metavar="REQUEST_ID", help="the request, jreq_...")
    approve = actions.add_parser(
        "approve", parents=[server, operator], help="approve pending requests (one or several)"
    )
    approve.add_argument("request_id", metavar="REQUEST_ID", nargs="+", help="the requests, jreq_...")
    approve.add_argument(
        "--ttl",
        type=options.whole_seconds,
        metavar="DURATION",
        help="how long the machine has to use the approval (server default 1h)",
    )
    approve.add_argument("--reason", help="recorded with the decision")
    reject = actions.add_parser("reject", parents=[server, operator], help="reject requests (one or several)")
    reject.add_argument("request_id", metavar="REQUEST_ID", nargs="+", help="the requests, jreq_...")
    reject.add_argument("--reason", help="shown to the machine and recorded")
    requests.set_defaults(handler=_requests)


def _tokens_command(p: Parents) -> None:
    commands, server, operator, paging = p.commands, p.server, p.operator, p.paging
    tokens = commands.add_parser("tokens", help="join tokens (create, list, revoke)")
    actions = tokens.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[server, operator], help="create a join token")
    create.add_argument("--site", help="a site token (joins wait for a pool to claim them) instead of --pool")
    create.add_argument(
        "--ttl", type=options.whole_seconds, metavar="DURATION", help="lifetime (server default 1d)"
    )
    create.add_argument("--max-uses", type=int, help="machines that may use it (server default 1)")
    create.add_argument("--require-approval", action="store_true", help="every join waits for an operator")
    create.add_argument(
        "--discovery",
        choices=("off", "defer-unknown"),
        help="defer-unknown: a machine not in the discovery inventory waits for an operator",
    )
    create.add_argument(
        "--tpm",
        choices=("off", "defer-unlisted", "require"),
        help="the TPM allow-list: defer machines whose EK is not listed, or require a listed one",
    )
    create.add_argument(
        "--tpm-trust",
        choices=("allow-list", "manufacturer"),
        help="manufacturer: also admit an activated EK whose certificate chains to a listed manufacturer",
    )
    create.add_argument(
        "--tpm-rejoin",
        choices=("any", "activate"),
        help="activate: a machine that joined with its TPM must activate the same TPM again to re-join",
    )
    create.add_argument(
        "--identity",
        choices=("any", "key"),
        help="key: refuse fingerprint-only joins (every machine must send a CSR)",
    )
    create.add_argument(
        "--aws-account",
        action="append",
        metavar="ACCOUNT",
        help="an AWS IAM join token admitting callers of this account (repeatable; docs/aws.md)",
    )
    create.add_argument(
        "--aws-arn",
        action="append",
        metavar="PATTERN",
        help="... whose ARN matches this pattern, * for any run of characters (repeatable; with "
        "--aws-account, both must match)",
    )
    create.add_argument("--description", help="a note for people (shown in `tokens list`)")
    create.add_argument(
        "--token-out",
        metavar="FILE",
        help="write the token to FILE (mode 0600) instead of showing it; join with --token-file FILE",
    )
    listing = actions.add_parser(
        "list",
        parents=[server, operator, paging],
        help="list join tokens (of --pool or --site, or of every pool the key sees and their sites)",
    )
    listing.add_argument("--site", help="a site's tokens instead of --pool's")
    revoke = actions.add_parser("revoke", parents=[server, operator], help="revoke a join token")
    revoke.add_argument("token_id", metavar="TOKEN_ID", help="the token's id, jtok_... (not the secret)")
    tokens.set_defaults(handler=_tokens)


def _pools_command(p: Parents) -> None:
    commands, server, operator, paging = p.commands, p.server, p.operator, p.paging
    pools = commands.add_parser("pools", help="compute pools (create, list, get, update, archive)")
    actions = pools.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (
        ("create", "create a pool"),
        ("update", "change a pool's name, workspace or lifetimes"),
    ):
        change = actions.add_parser(name, parents=[server, operator], help=text)
        _pool_id_argument(change)
        if name == "create":
            change.add_argument("--site", help="the site the pool belongs to (required)")
        change.add_argument(
            "--name", help="display name" + (" (default: the pool id)" if name == "create" else "")
        )
        change.add_argument(
            "--workspace",
            help="workspace id handed to machines" + (" (default: the pool id)" if name == "create" else ""),
        )
        change.add_argument(
            "--join-request-ttl",
            type=options.whole_seconds,
            metavar="DURATION",
            help="how long a deferred join waits for a decision (server default 1d)",
        )
        change.add_argument(
            "--certificate-ttl",
            type=options.whole_seconds,
            metavar="DURATION",
            help="machine certificate lifetime, 5m to the server's maximum (server default 1d)",
        )
        change.add_argument(
            "--ca-propagation",
            type=options.whole_seconds,
            metavar="DURATION",
            help="how long a rotated CA is in the bundle before it signs, 5m to 30d (server default 1d)",
        )
        change.add_argument(
            "--controlplane-url",
            metavar="URL",
            help="the control plane machines are sent to (the bootstrap's controlplaneHttpUrl)",
        )
        change.add_argument(
            "--bootstrap",
            metavar="FILE",
            help="a JSON object of the bootstrap handed to machines"
            + (" (replaces the pool's whole bootstrap)" if name == "update" else ""),
        )
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list pools")
    listing.add_argument("--site", help="only this site's pools")
    listing.add_argument("--state", choices=("active", "archived", "all"), help="only pools in this state")
    for name, text in (("get", "show a pool"), ("archive", "archive a pool: no new joins or tokens")):
        one = actions.add_parser(name, parents=[server, operator], help=text)
        _pool_id_argument(one)
    pools.set_defaults(handler=_pools)


def _machines_command(p: Parents) -> None:
    commands, server, operator, paging = p.commands, p.server, p.operator, p.paging
    machines = commands.add_parser("machines", help="joined machines (list, get, revoke)")
    actions = machines.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list",
        parents=[server, operator, paging],
        help="list machines (of --pool, or of every pool the key sees)",
    )
    listing.add_argument("--state", choices=("active", "revoked", "all"), help="only machines in this state")
    one = actions.add_parser("get", parents=[server, operator], help="show one machine")
    one.add_argument("machine_id", metavar="MACHINE_ID", help="the machine, mach_...")
    revoke = actions.add_parser("revoke", parents=[server, operator], help="revoke a machine")
    revoke.add_argument("machine_id", metavar="MACHINE_ID", help="the machine, mach_...")
    revoke.add_argument("--reason", help="recorded with the revocation")
    machines.set_defaults(handler=_machines)


def _apikeys_command(p: Parents) -> None:
    commands, server, operator, paging = p.commands, p.server, p.operator, p.paging
    apikeys = commands.add_parser("apikeys", help="operator API keys (create, list, revoke, whoami)")
    actions = apikeys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[server, operator], help="create an API key")
    create.add_argument(
        "--grant",
        action="append",
        required=True,
        metavar="PERMISSION@SCOPE",
        help="repeatable, e.g. compute:*@tenant or compute:join-requests:*@compute-pool/gpu-rack-1",
    )
    create.add_argument("--description", default="", help="a note for people (shown in `apikeys list`)")
    actions.add_parser("list", parents=[server, operator, paging], help="list the tenant's API keys")
    revoke = actions.add_parser("revoke", parents=[server, operator], help="revoke an API key")
    revoke.add_argument("key_id", metavar="KEY_ID", help="the key's id, key_... (not the secret)")
    actions.add_parser("whoami", parents=[server, operator], help="show the API key in use: tenant, grants")
    apikeys.set_defaults(handler=_apikeys)


def _ca_command(p: Parents) -> None:
    commands, server, operator = p.commands, p.server, p.operator
    authorities = commands.add_parser(
        "ca", help="a pool's certificate authority (get, rotate, activate, create-csr, import)"
    )
    actions = authorities.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (
        (
            "get",
            "the pool's CAs (active, prepared, retired; made on first use) and its trust bundle; "
            "without a pool, every pool's",
        ),
        (
            "rotate",
            "prepare a new CA key: in the bundle now, signing after the pool's propagation period; "
            "the previous CA stays trusted until its certificates expire",
        ),
        ("activate", "make the prepared CA sign now, before its propagation period has ended"),
    ):
        one = actions.add_parser(name, parents=[server, operator], help=text)
        _pool_id_argument(one)
        one.add_argument(
            "--bundle-out", metavar="FILE", help="write the bundle (PEM) to FILE, for openssl verify -CAfile"
        )
        if name == "rotate":
            one.add_argument(
                "--emergency",
                action="store_true",
                help="the key is suspected: the new CA signs at once, and verifiers holding an older "
                "bundle reject its certificates until they fetch it again",
            )
        if name == "activate":
            one.add_argument("--ca-id", metavar="CA_ID", help="the prepared CA you expect (ca_...)")
    one = actions.add_parser(
        "create-csr",
        parents=[server, operator],
        help="a CSR for a new pool CA key, for your organisation's CA to sign",
    )
    _pool_id_argument(one)
    one.add_argument("--out", metavar="FILE", help="write the CSR (PEM) to FILE instead of stdout")
    one = actions.add_parser(
        "import",
        parents=[server, operator],
        help="make the certificate your organisation's CA signed for the CSR the pool's next CA",
    )
    _pool_id_argument(one)
    one.add_argument("--certificate", required=True, metavar="FILE", help="the signed CA certificate (PEM)")
    one.add_argument(
        "--chain",
        required=True,
        metavar="FILE",
        help="PEM file of the issuers, the one that signed --certificate first and the root last",
    )
    one.add_argument("--bundle-out", metavar="FILE", help="write the pool's trust bundle (PEM) to FILE")
    authorities.set_defaults(handler=_ca)


def _audit_command(p: Parents) -> None:
    commands, server, operator, paging = p.commands, p.server, p.operator, p.paging
    audit = commands.add_parser("audit", help="security events (list)")
    actions = audit.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list events, newest first")
    listing.add_argument(
        "--detail-type", help="e.g. join-request.approved (the security. prefix is optional)"
    )
    audit.set_defaults(handler=_audit)


def _tpm_command(p: Parents) -> None:
    tpm_commands.add_parser(p.commands, p.server, p.operator, _operator)


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
    _join_command,
    _agent_command,
    _renew_command,
    _requests_command,
    _tokens_command,
    _pools_command,
    _machines_command,
    _apikeys_command,
    _ca_command,
    _audit_command,
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
        parents=[_server_options(top), _operator_options(top)],
    )
    parser.add_argument("--version", action="version", version=f"joinplane {VERSION}")
    parser.set_defaults(url_from=chosen.get("url-from") or "--url")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    default_directory = str(Path(d("dir")).expanduser()) if d("dir") else str(default_dir())
    parents = Parents(
        commands, d, _server_options(d), _operator_options(d), _paging_options(), default_directory
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
