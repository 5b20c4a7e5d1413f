"""`make run`: the template's HTTP API on http://127.0.0.1:3000 with everything behind it in this
process. See `python -m joinplane_local --help`."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from botocore.exceptions import BotoCoreError, ClientError

from .functions import DEFAULT_CONCURRENCY
from .runtime import Mode, Runtime, start_runtime
from .template import TEMPLATE, Template, load

EXAMPLE_ROUTE = "/api/compute/pools/list"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m joinplane_local",
        description="Serve template.yaml's HTTP API locally, with its functions running in-process "
        "over an embedded AWS emulation (default), a separate emulator (--endpoint-url) or real "
        "AWS (--aws).",
    )
    default_port = os.environ.get("PORT", "3000")
    parser.add_argument(
        "--port", type=int, default=int(default_port), help="0: any free port (default: $PORT or 3000)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--aws", action="store_true", help="use real AWS and a deployed stack")
    target.add_argument("--endpoint-url", help="a moto_server or DynamoDB Local run separately")
    parser.add_argument("--stack-name", help="--aws: take table and bus names from this stack's outputs")
    parser.add_argument("--table-name", help="--aws: the deployed table")
    parser.add_argument("--event-bus-name", help="--aws: the deployed event bus")
    parser.add_argument(
        "--seed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="create the dev tenant and its admin API key (default: on, off with --aws)",
    )
    parser.add_argument(
        "--workers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run stream, rule and schedule event sources (default: on, off with --aws)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive,
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help="invocations of one function at once, past which the API answers 429 with Retry-After, "
        f"as a throttled API does (default: {DEFAULT_CONCURRENCY}; a function's "
        "ReservedConcurrentExecutions wins)",
    )
    parser.add_argument(
        "--signing-mode",
        choices=("kms", "intermediate"),
        default=os.environ.get("JOINPLANE_SIGNING_MODE") or None,
        help="the SigningMode parameter ($JOINPLANE_SIGNING_MODE): kms, the pool CA's KMS key signs each "
        "certificate (default); intermediate, a per-container intermediate signs them (docs/pki.md)",
    )
    webhook = parser.add_argument_group(
        "webhook",
        "each new pending join request POSTed to a URL, as the template's API destination does "
        "when its WebhookUrl parameter is set (each option also reads the environment variable named)",
    )
    webhook.add_argument(
        "--webhook-url",
        default=os.environ.get("JOINPLANE_WEBHOOK_URL") or None,
        metavar="URL",
        help="the WebhookUrl parameter ($JOINPLANE_WEBHOOK_URL); unset: no webhook",
    )
    webhook.add_argument(
        "--webhook-auth-header-name",
        default=os.environ.get("JOINPLANE_WEBHOOK_AUTH_HEADER_NAME") or None,
        metavar="NAME",
        help="the WebhookAuthHeaderName parameter ($JOINPLANE_WEBHOOK_AUTH_HEADER_NAME; "
        "default: the template's)",
    )
    webhook.add_argument(
        "--webhook-auth-header-value",
        default=os.environ.get("JOINPLANE_WEBHOOK_AUTH_HEADER_VALUE") or None,
        metavar="VALUE",
        help="the WebhookAuthHeaderValue parameter, a secret: prefer $JOINPLANE_WEBHOOK_AUTH_HEADER_VALUE "
        "(a command line is visible to every user of the machine)",
    )
    parser.add_argument("--template", type=Path, default=TEMPLATE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.aws and (args.stack_name or args.table_name or args.event_bus_name):
        parser.error("--stack-name, --table-name and --event-bus-name go with --aws")
    if args.aws and not (args.stack_name or (args.table_name and args.event_bus_name)):
        parser.error("--aws needs --stack-name, or --table-name and --event-bus-name")
    return args


WEBHOOK_PARAMETERS = {
    "webhook_url": "WebhookUrl",
    "webhook_auth_header_name": "WebhookAuthHeaderName",
    "webhook_auth_header_value": "WebhookAuthHeaderValue",
}


def template_parameters(args: argparse.Namespace) -> dict[str, str]:
    """The template parameters the options set; without a URL there is no webhook to configure."""
    chosen = {"SigningMode": args.signing_mode} if args.signing_mode else {}
    if not args.webhook_url:
        return chosen
    return chosen | {
        parameter: str(getattr(args, option))
        for option, parameter in WEBHOOK_PARAMETERS.items()
        if getattr(args, option) is not None
    }


def banner(runtime: Runtime) -> str:
    where = {
        "embedded": f"embedded AWS emulation at {runtime.endpoint_url}",
        "endpoint": f"AWS endpoint {runtime.endpoint_url}",
        "aws": "real AWS",
    }[runtime.mode]
    lines = [f"Joinplane local runtime ({where})", f"  Serving on {runtime.url}", "", "Routes:"]
    width = max((len(r.route_key) for r in runtime.routes), default=0)
    for route in runtime.routes:
        auth = f"  [authorizer {route.authorizer.name}]" if route.authorizer else ""
        lines.append(f"  {route.route_key:<{width}}  → {route.function}{auth}")
    lines += [
        "  GET|POST /_local/clock  (read, advance or reset the local clock)",
        "  POST /_local/schedules/<Function>/run  (run a scheduled function now)",
    ]
    sources = runtime.workers.describe()
    if sources:
        state = "" if runtime.workers.running else "  (off: --workers to run them here)"
        lines += ["", f"Event sources:{state}"] + [f"  {line}" for line in sources]
    if runtime.dev is not None:
        parts = [f"tenant {runtime.dev.tenant}"]
        parts += [f"site {runtime.dev.site}"] if runtime.dev.site else []
        parts += [f"pool {runtime.dev.pool}"] if runtime.dev.pool else []
        lines += ["", "Dev " + ", ".join(parts)]
    if runtime.admin_key:
        lines += [f"Admin API key: {runtime.admin_key}"]
        example = next((r for r in runtime.routes if r.path == EXAMPLE_ROUTE), None)
        example = example or next((r for r in runtime.routes if r.authorizer and r.method == "POST"), None)
        if example is not None:
            tenant = runtime.dev.tenant if runtime.dev else "dev"
            lines += [
                "",
                "Try:",
                f'  curl -s {runtime.url}{example.path} -H "Authorization: Bearer {runtime.admin_key}" '
                f'-d \'{{"tenantId":"{tenant}"}}\'',
            ]
    lines += ["", "Ctrl-C to stop."]
    return "\n".join(lines)


def configure_logging(template_path: Path) -> None:
    """Show the functions' logs at the template's application log level, as Lambda would with
    `LoggingConfig` (here as plain lines on stderr, easier to read than Lambda's JSON)."""
    template = Template(load(template_path))
    config = template.document.get("Globals", {}).get("Function", {}).get("LoggingConfig", {})
    level = str(template.resolve(config.get("ApplicationLogLevel", "INFO"))).upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (docker stop, systemd, CI) shuts down as cleanly as Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    mode: Mode = "aws" if args.aws else "endpoint" if args.endpoint_url else "embedded"
    configure_logging(args.template)
    try:
        runtime = start_runtime(
            port=args.port,
            host=args.host,
            mode=mode,
            endpoint_url=args.endpoint_url,
            stack_name=args.stack_name,
            table_name=args.table_name,
            event_bus_name=args.event_bus_name,
            seed=args.seed,
            workers=args.workers,
            template_path=args.template,
            parameters=template_parameters(args),
            concurrency=args.concurrency,
        )
    except KeyboardInterrupt:
        return 130
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            # Errno 98 alone does not say which port, nor how to move it.
            error = OSError(
                f"port {args.port} on {args.host} is in use (another make run?); "
                "move this one with PORT=N make run, or --port N"
            )
        print(f"joinplane-local: cannot start: {error}", file=sys.stderr)
        return 1
    except (ValueError, BotoCoreError, ClientError) as error:
        print(f"joinplane-local: cannot start: {error}", file=sys.stderr)
        return 1
    try:
        print(banner(runtime), flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        print("\nShutting down.", file=sys.stderr, flush=True)
    finally:
        # A second Ctrl-C must not cut the shutdown short with a traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        runtime.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
