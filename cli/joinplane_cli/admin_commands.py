"""The operator's commands on the command line (`requests`, `tokens`, `pools`, `machines`, `apikeys`,
`ca`, `audit`): each one's parser, and its handler, which connects to the API with the options given
and imports the module doing the command's work (`admin_requests`, `admin_tokens`...) only then."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from joinplane_cli import options, shared_options
from joinplane_cli.api import OPERATOR_RETRY, Client
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.shared_options import Parents

if TYPE_CHECKING:
    from joinplane_cli import admin


def _api_key(args: argparse.Namespace) -> str:
    key = shared_options.need(args.api_key, "--api-key", "JOINPLANE_API_KEY")
    if key.startswith(("jpt_", "jpm_")):
        kind = "a join token" if key.startswith("jpt_") else "a machine token"
        raise CliError(
            f"--api-key is {kind} ({key[:4]}...), not an API key: operator commands take an API key "
            "jpk_... (`joinplane apikeys create`, or the one `make run` prints)",
            Exit.USAGE,
        )
    return key


def connect(args: argparse.Namespace) -> admin.Operator:
    from joinplane_cli import admin

    url = shared_options.need(args.url, "--url", "JOINPLANE_URL")
    client = Client(
        url, api_key=_api_key(args), timeout=args.timeout, retry=OPERATOR_RETRY, url_from=args.url_from
    )
    tenant = args.tenant or admin.whoami_tenant(client)
    return admin.Operator(client, tenant, args.output, quiet=getattr(args, "quiet", False))


def _pool(args: argparse.Namespace) -> str:
    return shared_options.need(args.pool, "--pool", "JOINPLANE_POOL")


def _requests(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin_requests

    op = connect(args)
    if args.action == "list" and args.watch:
        return admin_requests.requests_watch(op, args.pool, args.state, args.interval)
    if args.action == "list":
        return admin_requests.requests_list(op, args.pool, args.state, args.limit, args.cursor, args.every)
    if args.action == "get":
        return admin_requests.requests_get(op, args.pool, args.request_id)
    ttl = getattr(args, "ttl", None)
    return admin_requests.requests_decide_each(op, args.action, args.pool, args.request_id, args.reason, ttl)


def _tokens(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin_tokens

    op = connect(args)
    if args.action == "revoke":
        return admin_tokens.tokens_revoke(op, args.token_id)
    if args.action == "list":  # neither --pool nor --site: every pool the key sees
        return admin_tokens.tokens_list(op, args.pool, args.site, args.limit, args.cursor, args.every)
    pool = None if args.site else _pool(args)
    return admin_tokens.tokens_create(
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
    from joinplane_cli import admin_pools

    op = connect(args)
    if args.action == "list":
        return admin_pools.pools_list(op, args.site, args.state, args.limit, args.cursor, args.every)
    pool = args.pool_id or _pool(args)
    if args.action == "simulate":
        from joinplane_cli import admin_simulate

        return admin_simulate.pools_simulate(op, pool, args.policy, args.limit, args.changed)
    bootstrap = admin_pools.read_bootstrap(
        getattr(args, "bootstrap", None), getattr(args, "controlplane_url", None)
    )
    policy = admin_pools.read_policy(getattr(args, "policy", None))
    if args.action == "create":
        site = shared_options.need(args.site, "--site", "a site id", configurable=False)
        return admin_pools.pools_create(
            op,
            pool,
            site,
            args.name,
            args.workspace,
            args.join_request_ttl,
            args.certificate_ttl,
            args.ca_propagation,
            bootstrap,
            args.approvals_required,
            policy,
        )
    if args.action == "update":
        return admin_pools.pools_update(
            op,
            pool,
            args.name,
            args.workspace,
            args.join_request_ttl,
            args.certificate_ttl,
            args.ca_propagation,
            bootstrap,
            args.approvals_required,
            policy,
        )
    if args.action == "get":
        return admin_pools.pools_get(op, pool)
    return admin_pools.pools_archive(op, pool)


def _machines(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin_machines

    op = connect(args)
    if args.action == "list":
        return admin_machines.machines_list(op, args.pool, args.state, args.limit, args.cursor, args.every)
    if args.action == "get":
        return admin_machines.machines_get(op, args.machine_id)
    return admin_machines.machines_revoke(op, args.machine_id, args.reason)


def _apikeys(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin_apikeys

    op = connect(args)
    if args.action == "create":
        return admin_apikeys.apikeys_create(op, args.grant, args.description)
    if args.action == "list":
        return admin_apikeys.apikeys_list(op, args.limit, args.cursor, args.every)
    if args.action == "whoami":
        return admin_apikeys.apikeys_whoami(op)
    return admin_apikeys.apikeys_revoke(op, args.key_id)


def _ca(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin_ca

    op = connect(args)
    if args.action == "get" and not (args.pool_id or args.pool):
        return admin_ca.ca_get_across(op, args.bundle_out)  # every active pool the key sees
    pool = args.pool_id or _pool(args)
    if args.action == "get":
        return admin_ca.ca_get(op, pool, args.bundle_out)
    if args.action == "rotate":
        return admin_ca.ca_rotate(op, pool, args.bundle_out, args.emergency)
    if args.action == "activate":
        return admin_ca.ca_activate(op, pool, args.ca_id, args.bundle_out)
    if args.action == "create-csr":
        return admin_ca.ca_create_csr(op, pool, args.out)
    return admin_ca.ca_import(op, pool, args.certificate, args.chain, args.bundle_out)


def _audit(args: argparse.Namespace) -> Exit:
    from joinplane_cli import admin_audit

    return admin_audit.audit_list(
        connect(args), args.pool, args.detail_type, args.limit, args.cursor, args.every
    )


def requests_command(p: Parents) -> None:
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
        type=shared_options.duration,
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


def tokens_command(p: Parents) -> None:
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


def pools_command(p: Parents) -> None:
    commands, server, operator, paging = p.commands, p.server, p.operator, p.paging
    pools = commands.add_parser("pools", help="compute pools (create, list, get, update, archive, simulate)")
    actions = pools.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (
        ("create", "create a pool"),
        (
            "update",
            "change a pool's name, workspace, lifetimes, bootstrap, join policy or approvals required",
        ),
    ):
        change = actions.add_parser(name, parents=[server, operator], help=text)
        shared_options.pool_id_argument(change)
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
            "--approvals-required",
            type=int,
            choices=(1, 2, 3),
            metavar="N",
            help="how many different API keys must approve a join request, 1 to 3 (server default 1)",
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
        change.add_argument(
            "--policy",
            metavar="FILE",
            help="the join policy: a JSON list of CEL rules (docs/policy.md), - for standard input"
            + ("; replaces the pool's whole policy, `none` removes it" if name == "update" else ""),
        )
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list pools")
    listing.add_argument("--site", help="only this site's pools")
    listing.add_argument("--state", choices=("active", "archived", "all"), help="only pools in this state")
    for name, text in (("get", "show a pool"), ("archive", "archive a pool: no new joins or tokens")):
        one = actions.add_parser(name, parents=[server, operator], help=text)
        shared_options.pool_id_argument(one)
    simulate = actions.add_parser(
        "simulate",
        parents=[server, operator],
        help="what a draft join policy would have decided for the pool's recent joins (saves nothing)",
    )
    shared_options.pool_id_argument(simulate)
    simulate.add_argument(
        "--policy",
        required=True,
        metavar="FILE",
        help="the draft: a JSON list of rules (docs/policy.md); - reads stdin",
    )
    simulate.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="simulate the N newest requests and the N newest machines (1 to 200, server default 200)",
    )
    simulate.add_argument(
        "--changed", action="store_true", help="list only the joins whose outcome would change"
    )
    pools.set_defaults(handler=_pools)


def machines_command(p: Parents) -> None:
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


def apikeys_command(p: Parents) -> None:
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


def ca_command(p: Parents) -> None:
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
        shared_options.pool_id_argument(one)
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
    shared_options.pool_id_argument(one)
    one.add_argument("--out", metavar="FILE", help="write the CSR (PEM) to FILE instead of stdout")
    one = actions.add_parser(
        "import",
        parents=[server, operator],
        help="make the certificate your organisation's CA signed for the CSR the pool's next CA",
    )
    shared_options.pool_id_argument(one)
    one.add_argument("--certificate", required=True, metavar="FILE", help="the signed CA certificate (PEM)")
    one.add_argument(
        "--chain",
        required=True,
        metavar="FILE",
        help="PEM file of the issuers, the one that signed --certificate first and the root last",
    )
    one.add_argument("--bundle-out", metavar="FILE", help="write the pool's trust bundle (PEM) to FILE")
    authorities.set_defaults(handler=_ca)


def audit_command(p: Parents) -> None:
    commands, server, operator, paging = p.commands, p.server, p.operator, p.paging
    audit = commands.add_parser("audit", help="security events (list)")
    actions = audit.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[server, operator, paging], help="list events, newest first")
    listing.add_argument(
        "--detail-type", help="e.g. join-request.approved (the security. prefix is optional)"
    )
    audit.set_defaults(handler=_audit)
