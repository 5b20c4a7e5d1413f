"""One local run of the whole system: the HTTP API, the functions and their event sources.

Three ways to reach AWS:
- `embedded` (the default): a moto server in this process; resources created from the template.
- `endpoint`: a moto_server or DynamoDB Local run separately (`--endpoint-url`); resources are
  created where missing, so data survives restarts of this runtime.
- `aws`: real AWS with the caller's own credentials and an already deployed stack; nothing is
  created. The deployed stack runs its own stream, rule and schedule functions, so the workers
  are off unless asked for, and the dev tenant (an admin key!) is only seeded when asked for.

The functions read their configuration from the process environment, which the runtime sets for
as long as it runs and puts back on `stop()`, so a test session can start and stop runtimes.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO

from joinplane import container

from . import emulator as embedded
from . import iam
from .api_routes import Route
from .event_rules import QUEUE_WAIT_SECONDS
from .functions import DEFAULT_CONCURRENCY, Functions
from .gateway import Gateway
from .stream_poller import STREAM_POLL_SECONDS
from .template import REGION, TEMPLATE, Names, Template, create_resources, load
from .worker_loop import ClientFactory
from .workers import Workers

Mode = Literal["embedded", "endpoint", "aws"]
MODES: tuple[Mode, ...] = ("embedded", "endpoint", "aws")
AWS_STREAM_POLL_SECONDS = 0.25


class _Environment:
    """Changes to os.environ that can be put back exactly."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def set(self, values: Mapping[str, str]) -> None:
        for name, value in values.items():
            self._saved.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def unset(self, name: str) -> None:
        self._saved.setdefault(name, os.environ.get(name))
        os.environ.pop(name, None)

    def restore(self) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved.clear()


def client_factory(endpoint_url: str | None, region: str) -> ClientFactory:
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(region_name=region)
    # A long poll must end before the read timeout does.
    config = Config(
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=2,
        read_timeout=QUEUE_WAIT_SECONDS + 10,
    )
    lock = threading.Lock()  # boto3 sessions are not thread-safe; the clients they make are

    def client(service: str) -> Any:
        with lock:
            return session.client(service, endpoint_url=endpoint_url, config=config)  # type: ignore[call-overload]

    return client


@dataclass
class DevTenant:
    tenant: str
    site: str | None
    pool: str | None


@dataclass
class Runtime:
    url: str
    mode: Mode
    endpoint_url: str | None
    admin_key: str | None
    template: Template
    functions: Functions
    gateway: Gateway
    workers: Workers
    dev: DevTenant | None = None
    _emulator: embedded.Emulator | None = field(default=None, repr=False)
    _forget: Callable[[], None] | None = field(default=None, repr=False)
    _environment: _Environment = field(default_factory=_Environment, repr=False)
    _stopped: bool = field(default=False, repr=False)

    @property
    def routes(self) -> list[Route]:
        return self.gateway.routes

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until the stream and rule workers have delivered everything so far."""
        return self.workers.drain(timeout)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        _shutdown(self.gateway, self.workers, self._emulator, self.functions, self._environment, self._forget)

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _forget_tables(template: Template, clients: ClientFactory) -> None:
    """An embedded runtime's state lives in memory and dies with it. moto's backends are shared by
    every server in one process, so a stopped runtime deletes its tables: the next embedded runtime
    of the process (a test module's, after another's) starts empty, as `make run` promises."""
    dynamodb = clients("dynamodb")
    for definition in template.table_definitions().values():
        with suppress(Exception):  # already gone, or the emulator is going: nothing to keep
            dynamodb.delete_table(TableName=definition["create"]["TableName"])


def _shutdown(
    gateway: Gateway | None,
    workers: Workers | None,
    emulator: embedded.Emulator | None,
    functions: Functions | None,
    environment: _Environment,
    forget: Callable[[], None] | None = None,
) -> None:
    if gateway is not None:
        gateway.stop()
    if workers is not None:
        workers.stop()
    if emulator is not None:
        if forget is not None:
            forget()
        emulator.stop()
    if functions is not None:
        functions.unload()
    environment.restore()
    # What the functions cached (clients, settings, pools, the clock's offset) was this run's.
    container.reset()


def _stack_names(clients: ClientFactory, template: Template, stack_name: str) -> dict[str, str]:
    """Physical names of the stack's resources, through the template's `!Ref` outputs."""
    stacks = clients("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    physical = {}
    for key, output in template.document.get("Outputs", {}).items():
        value = output.get("Value")
        if isinstance(value, dict) and set(value) == {"Ref"} and key in outputs:
            physical[str(value["Ref"])] = outputs[key]
    return physical


def _only(template: Template, resource_type: str, option: str) -> str:
    found = list(template.of_type(resource_type))
    if len(found) != 1:
        raise ValueError(f"{option} needs exactly one {resource_type} in the template, found {len(found)}")
    return found[0]


def _seed(log: TextIO, url: str) -> tuple[str | None, DevTenant | None]:
    try:
        from joinplane_local import seed
    except ModuleNotFoundError as error:
        print(f"[joinplane-local] not seeding a dev tenant: {error}", file=log, flush=True)
        return None, None
    key = seed.seed_dev_tenant(os.environ.get("JOINPLANE_DEV_ADMIN_KEY") or None, public_url=url)
    dev = DevTenant(
        tenant=str(getattr(seed, "DEV_TENANT", "dev")),
        site=getattr(seed, "DEV_SITE", None),
        pool=getattr(seed, "DEV_POOL", None),
    )
    return key, dev


def _check_parameters(template_path: Path, parameters: Mapping[str, str]) -> None:
    """Refuse what CloudFormation would refuse, before anything starts: a parameter the template
    does not declare, or values its `Rules` reject (a webhook URL without its header value)."""
    document = load(template_path)
    unknown = sorted(set(parameters) - set(document.get("Parameters") or {}))
    if unknown:
        raise ValueError(f"the template has no parameter {', '.join(unknown)}")
    broken = Template(document, Names(parameters=dict(parameters))).broken_rules()
    if broken:
        raise ValueError("; ".join(broken))


def _check_port_free(host: str, port: int) -> None:
    """Raise EADDRINUSE now if something listens on the port: the gateway binds it only after the
    emulator, the tables and the workers are up, seconds later, and would then undo them all."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the gateway binds
        probe.bind((host, port))


def start_runtime(
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    mode: Mode = "embedded",
    endpoint_url: str | None = None,
    stack_name: str | None = None,
    table_name: str | None = None,
    event_bus_name: str | None = None,
    seed: bool | None = None,
    workers: bool | None = None,
    template_path: Path = TEMPLATE,
    enforce_timeouts: bool = True,
    log: TextIO | None = None,
    parameters: Mapping[str, str] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Runtime:
    """Start everything and return once the HTTP API answers.

    `seed` and `workers` default to on, except in `aws` mode where they default to off.
    `parameters` set template parameters (the others keep their `Default`), e.g. `WebhookUrl`.
    `concurrency` is each function's limit of invocations at once (past it: a 429), unless the
    template reserves another.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if mode == "endpoint" and not endpoint_url:
        raise ValueError("endpoint mode needs endpoint_url")
    if mode != "endpoint" and endpoint_url:
        raise ValueError("endpoint_url is only for endpoint mode")
    if mode != "aws" and (stack_name or table_name or event_bus_name):
        raise ValueError("stack_name, table_name and event_bus_name are only for aws mode")
    out = log or sys.stderr
    _check_parameters(template_path, parameters or {})
    seed = mode != "aws" if seed is None else seed
    run_workers = mode != "aws" if workers is None else workers

    if port:
        _check_port_free(host, port)
    environment = _Environment()
    emulator: embedded.Emulator | None = None
    gateway: Gateway | None = None
    worker_set: Workers | None = None
    functions: Functions | None = None
    forget: Callable[[], None] | None = None
    try:
        if mode == "aws":
            environment.unset("AWS_ENDPOINT_URL")
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or REGION
        else:
            # Never real credentials towards an emulator, whatever the shell holds.
            environment.set(embedded.FAKE_CREDENTIALS)
            environment.unset("AWS_SESSION_TOKEN")
            environment.unset("AWS_PROFILE")
            region = embedded.FAKE_CREDENTIALS["AWS_DEFAULT_REGION"]
            if mode == "embedded":
                emulator = embedded.start()
                endpoint_url = emulator.endpoint_url
            assert endpoint_url is not None
            environment.set({"AWS_ENDPOINT_URL": endpoint_url, "AWS_REGION": region})
        if mode != "aws":
            # Towards an emulator, IAM is emulated too: each function's calls are checked against
            # its policy (joinplane_local.iam). In AWS, IAM itself does it.
            iam.install()
        container.reset()  # whatever a previous run in this process cached was for its endpoint
        clients = client_factory(endpoint_url, region)

        document = load(template_path)
        names = Names(region=region, parameters=dict(parameters or {}))
        if mode == "aws":
            names.account = clients("sts").get_caller_identity()["Account"]
            if stack_name:
                names.stack = stack_name
                names.physical.update(_stack_names(clients, Template(document, Names()), stack_name))
            probe = Template(document, Names())
            if table_name:
                names.physical[_only(probe, "AWS::DynamoDB::Table", "--table-name")] = table_name
            if event_bus_name:
                names.physical[_only(probe, "AWS::Events::EventBus", "--event-bus-name")] = event_bus_name
            missing = [
                logical_id
                for kind in ("AWS::DynamoDB::Table", "AWS::Events::EventBus")
                for logical_id in probe.of_type(kind)
                if logical_id not in names.physical
            ]
            if missing:
                raise ValueError(
                    f"aws mode needs the deployed names of {', '.join(missing)}: "
                    "give --stack-name, or --table-name and --event-bus-name"
                )
        template = Template(document, names)
        if mode == "embedded":
            forget = functools.partial(_forget_tables, template, clients)
        if mode != "aws":
            try:
                create_resources(template, clients)
            except Exception as error:
                from botocore.exceptions import EndpointConnectionError

                # Nothing answering at all is fatal at once: the workers would only retry it.
                if mode == "embedded" or isinstance(error, EndpointConnectionError):
                    raise
                # DynamoDB Local serves tables only: the table is there, events go nowhere.
                print(
                    f"[joinplane-local] creating resources at {endpoint_url}: {error}", file=out, flush=True
                )

        environment.set(template.function_environment())
        container.reset(keep_clients=True)  # the functions' names are set now
        functions = Functions(
            template,
            base_dir=template_path.parent,
            enforce_timeouts=enforce_timeouts,
            concurrency=concurrency,
        )
        # A unique suffix keeps apart the rules and queues of runs sharing one account or emulator.
        worker_set = Workers(
            template,
            functions,
            clients,
            log=out,
            suffix=uuid.uuid4().hex[:8],
            # DynamoDB Streams allows 5 GetRecords a second per shard; Lambda itself polls 4 times.
            stream_poll_seconds=AWS_STREAM_POLL_SECONDS if mode == "aws" else STREAM_POLL_SECONDS,
        )
        if run_workers:
            worker_set.start()  # before seeding: the stream consumers see the dev tenant's writes
        gateway = Gateway(template, functions, host=host, port=port, log=out)
        worker_set.register_routes(gateway)
        # The port is taken before seeding (the dev pool's bootstrap names the real URL), and
        # connections are accepted only after: the first request finds the dev admin key, and a
        # refusal can never sit in the authorizer cache for ReauthorizeEvery seconds.
        url = gateway.bind()
        admin_key, dev = _seed(out, url) if seed else (None, None)
        gateway.start()
    except BaseException:
        _shutdown(gateway, worker_set, emulator, functions, environment, forget)
        raise
    return Runtime(
        url=url,
        mode=mode,
        endpoint_url=endpoint_url,
        admin_key=admin_key,
        template=template,
        functions=functions,
        gateway=gateway,
        workers=worker_set,
        dev=dev,
        _emulator=emulator,
        _forget=forget,
        _environment=environment,
    )


@contextmanager
def running(**options: Any) -> Iterator[Runtime]:
    runtime = start_runtime(**options)
    try:
        yield runtime
    finally:
        runtime.stop()
