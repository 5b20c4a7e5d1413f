"""The machine's commands on the command line (`join`, `agent`, `renew`): each one's parser, and its
handler, which imports the module doing the work (`agent`, `service`, `renew`) only then: those load
`cryptography`, which help and completion never need."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from joinplane_cli import shared_options, tpm_commands
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.shared_options import Parents


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
    token_id = shared_options.need(args.token_id, "--token-id", "JOINPLANE_TOKEN_ID", configurable=False)
    if not token_id.startswith("jtok_"):
        raise CliError(f"--token-id must be a join token's id, jtok_... (got {token_id[:5]}...)", Exit.USAGE)
    return token_id


def _join(args: argparse.Namespace) -> Exit:
    from joinplane_cli import agent

    token_id = _token_id(args)
    token = (
        ""
        if token_id
        else shared_options.need(_token(args), "--token", "JOINPLANE_TOKEN", configurable=False)
    )
    join_options = agent.JoinOptions(
        url=shared_options.need(args.url, "--url", "JOINPLANE_URL"),
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
    from joinplane_cli import renew

    return renew.renew(
        renew.RenewOptions(
            url=args.url,
            directory=Path(args.dir).absolute(),
            rotate_key=args.rotate_key,
            output=args.output,
            timeout=args.timeout,
        )
    )


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


def join_command(p: Parents) -> None:
    commands, server, d, default_directory = p.commands, p.server, p.d, p.default_directory
    join = commands.add_parser(
        "join",
        parents=[server],
        help="join this machine to a pool (with a token, or --aws-iam)",
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
        type=shared_options.duration,
        metavar="DURATION",
        help="time between retries while waiting (default: the server's retryAfterSeconds)",
    )
    join.add_argument(
        "--max-wait",
        type=shared_options.duration,
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


def agent_command(p: Parents) -> None:
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


def renew_command(p: Parents) -> None:
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
