"""The template's `AWS::Serverless::Function`s, run in this process.

Each function's handler file is imported under its own module name, so the many `app.py` files
never shadow one another and no function directory goes on `sys.path` (Lambda would not see a
sibling function's code either). A module is imported once, on its first invocation, which is the
local form of a cold start; an import that fails is retried on the next invocation, as Lambda
re-runs a failed init.

Invocations round-trip the event and the result through JSON because Lambda does: a handler
cannot mutate its caller's objects, and a result Lambda could not marshal fails here too.

Each function runs at most its concurrency limit of invocations at once (`ReservedConcurrentExecutions`
when the template sets one, else the runtime's default); one more is throttled at once, as Lambda
throttles a synchronous invocation, rather than queued. The limit is lower than Lambda's: the
invocations share one interpreter and its GIL, so past a few at a time each one only gets slower,
until all of them outlast their Timeout together.
"""

from __future__ import annotations

import decimal
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from . import iam
from .template import ROOT, Template

FUNCTION_TYPE = "AWS::Serverless::Function"
# SAM's own defaults when neither the function nor Globals set a value.
DEFAULT_MEMORY_MB = 128
DEFAULT_TIMEOUT_S = 3.0
# Invocations of one function at once, unless the template reserves another number. With this
# many in flight, 2 cores keep every join far inside its 10 s Timeout (`make bench` sends 200 at
# once: none times out).
DEFAULT_CONCURRENCY = 10


class FunctionError(Exception):
    """A function failed the way Lambda reports it: init error, handler error, timeout, or a
    result that is not JSON. The original exception is the `__cause__`."""

    def __init__(self, logical_id: str, error_type: str, message: str) -> None:
        super().__init__(f"{logical_id}: {error_type}: {message}")
        self.logical_id = logical_id
        self.error_type = error_type
        self.message = message


class Throttled(FunctionError):
    """The function already runs its concurrency limit of invocations: this one never started."""

    def __init__(self, logical_id: str, limit: int) -> None:
        # Lambda's own words for a throttled invocation (TooManyRequestsException, "Rate Exceeded.").
        super().__init__(
            logical_id, "TooManyRequestsException", f"Rate Exceeded. (concurrency limit {limit})"
        )
        self.limit = limit


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    name: str
    arn: str
    code_dir: Path
    module_file: Path
    handler_attr: str
    memory_mb: int
    timeout_s: float
    # ReservedConcurrentExecutions, when the template sets it.
    reserved_concurrency: int | None = None
    # Unresolved event source definitions: callers need the intrinsics (`!GetAtt Table.StreamArn`)
    # to find the logical resource behind them.
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)


class LambdaContext:
    """The attributes of the Python runtime's context object.

    `memory_limit_in_mb` is a string because the real runtime reads it from an environment
    variable and hands it over unconverted.
    """

    def __init__(self, spec: FunctionSpec, log_stream_name: str) -> None:
        self.function_name = spec.name
        self.function_version = "$LATEST"
        self.invoked_function_arn = spec.arn
        self.memory_limit_in_mb = str(spec.memory_mb)
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{spec.name}"
        self.log_stream_name = log_stream_name
        self.identity: Any = None
        self.client_context: Any = None
        self.tenant_id: str | None = None
        self._deadline = time.monotonic() + spec.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@dataclass
class _Loaded:
    module: ModuleType
    handler: Callable[[Any, Any], Any]
    log_stream_name: str


def _property(function: Mapping[str, Any], globals_: Mapping[str, Any], name: str, default: Any) -> Any:
    value = function.get(name, globals_.get(name, default))
    return default if value is None else value


def specs_from_template(template: Template, base_dir: Path = ROOT) -> dict[str, FunctionSpec]:
    """`CodeUri`s are relative to the template's directory, as for `sam build`."""
    globals_ = template.document.get("Globals", {}).get("Function", {})
    names = template.names
    specs: dict[str, FunctionSpec] = {}
    for logical_id, resource in template.of_type(FUNCTION_TYPE).items():
        props = resource.get("Properties", {})
        code_uri = template.resolve(_property(props, globals_, "CodeUri", "."))
        handler = str(template.resolve(_property(props, globals_, "Handler", "app.lambda_handler")))
        module_path, _, attr = handler.rpartition(".")
        if not module_path or not attr:
            raise ValueError(f"{logical_id}: Handler {handler!r} is not <module>.<function>")
        code_dir = (base_dir / str(code_uri)).resolve()
        reserved = props.get("ReservedConcurrentExecutions")
        if "FunctionName" in props:
            name = str(template.resolve(props["FunctionName"]))
        else:
            name = f"{names.stack}-{logical_id}"
        specs[logical_id] = FunctionSpec(
            logical_id=logical_id,
            name=name,
            arn=f"arn:aws:lambda:{names.region}:{names.account}:function:{name}",
            code_dir=code_dir,
            module_file=code_dir / (module_path.replace(".", "/") + ".py"),
            handler_attr=attr,
            memory_mb=int(template.resolve(_property(props, globals_, "MemorySize", DEFAULT_MEMORY_MB))),
            timeout_s=float(template.resolve(_property(props, globals_, "Timeout", DEFAULT_TIMEOUT_S))),
            reserved_concurrency=None if reserved is None else int(template.resolve(reserved)),
            events=dict(props.get("Events") or {}),
            properties=dict(props),
        )
    return specs


def _lambda_json(value: Any) -> Any:
    """What the Python runtime's serializer does with values json cannot encode itself."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(f"{value!r} is not JSON serializable")


def module_name(logical_id: str) -> str:
    return f"joinplane_fn_{logical_id}"


def report_failure(logical_id: str, error: BaseException, stream: TextIO | None = None) -> None:
    """Print a failure the way Lambda logs one: `[ERROR] Type: message` and the traceback."""
    out = stream or sys.stderr
    if isinstance(error, FunctionError):
        print(f"[ERROR] {error.error_type}: {error.message} ({logical_id})", file=out)
        if error.__cause__ is not None:
            traceback.print_exception(error.__cause__, file=out)
    else:
        print(f"[ERROR] {type(error).__name__}: {error} ({logical_id})", file=out)
        traceback.print_exception(error, file=out)
    out.flush()


# Entered around each handler call with the function and its event: what `make cost` meters an
# invocation by (its duration, and the AWS calls and log lines made inside it).
InvocationHook = Callable[[FunctionSpec, Any], AbstractContextManager[Any]]


class Functions:
    """Every function of one template, invocable by logical id."""

    def __init__(
        self,
        template: Template,
        *,
        base_dir: Path = ROOT,
        environment: Mapping[str, str] | None = None,
        enforce_timeouts: bool = True,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        if concurrency < 1:
            raise ValueError("the default concurrency limit must be at least 1")
        self.template = template
        self.specs = specs_from_template(template, base_dir)
        self.environment = dict(template.function_environment() if environment is None else environment)
        # Lambda stops a handler at its Timeout; a thread cannot be stopped, so an over-long
        # invocation finishes and is then reported as the timeout it would have been.
        self.enforce_timeouts = enforce_timeouts
        self._loaded: dict[str, _Loaded] = {}
        self._locks = {logical_id: threading.Lock() for logical_id in self.specs}
        self.default_concurrency = concurrency
        self.limits = {
            logical_id: concurrency if spec.reserved_concurrency is None else spec.reserved_concurrency
            for logical_id, spec in self.specs.items()
        }
        self._slots = {name: threading.BoundedSemaphore(limit) for name, limit in self.limits.items()}
        self.invocation_hooks: list[InvocationHook] = []

    def put_concurrency(self, logical_id: str, limit: int | None) -> None:
        """Lambda's PutFunctionConcurrency; None puts back the limit the runtime started with.
        Invocations in flight keep their slots; the new limit counts from the next one."""
        spec = self.spec(logical_id)
        if limit is not None and limit < 0:
            raise ValueError("a concurrency limit cannot be negative")
        if limit is None:
            limit = (
                self.default_concurrency if spec.reserved_concurrency is None else spec.reserved_concurrency
            )
        self.limits[logical_id] = limit
        self._slots[logical_id] = threading.BoundedSemaphore(limit)

    def spec(self, logical_id: str) -> FunctionSpec:
        try:
            return self.specs[logical_id]
        except KeyError:
            raise KeyError(f"no AWS::Serverless::Function {logical_id!r} in the template") from None

    def module(self, logical_id: str) -> ModuleType:
        return self._load(logical_id).module

    def load_all(self) -> None:
        """Import every function now (an init error surfaces at start instead of first call)."""
        for logical_id in self.specs:
            self._load(logical_id)

    def unload(self) -> None:
        """Forget the imported modules, so the next invocation is a cold start."""
        for logical_id in list(self._loaded):
            self._loaded.pop(logical_id, None)
            sys.modules.pop(module_name(logical_id), None)

    def _load(self, logical_id: str) -> _Loaded:
        loaded = self._loaded.get(logical_id)
        if loaded is not None:
            return loaded
        spec = self.spec(logical_id)
        with self._locks[logical_id]:
            loaded = self._loaded.get(logical_id)
            if loaded is not None:
                return loaded
            os.environ.update(self.environment)
            name = module_name(logical_id)
            import_spec = importlib.util.spec_from_file_location(name, spec.module_file)
            if import_spec is None or import_spec.loader is None:
                raise FunctionError(
                    logical_id, "Runtime.ImportModuleError", f"cannot load {spec.module_file}"
                )
            module = importlib.util.module_from_spec(import_spec)
            # Registered before it runs: dataclasses, pydantic and pickling look their module up.
            sys.modules[name] = module
            try:
                import_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
            handler = getattr(module, spec.handler_attr, None)
            if not callable(handler):
                sys.modules.pop(name, None)
                raise FunctionError(
                    logical_id,
                    "Runtime.HandlerNotFound",
                    f"{spec.module_file.name} has no callable {spec.handler_attr!r}",
                )
            stream = time.strftime("%Y/%m/%d") + f"/[$LATEST]{uuid.uuid4().hex}"
            loaded = _Loaded(module=module, handler=handler, log_stream_name=stream)
            self._loaded[logical_id] = loaded
            return loaded

    def invoke(self, logical_id: str, event: Any) -> Any:
        """Run the handler with `event` and return its result; raise FunctionError on failure,
        Throttled (one) when the function already runs its concurrency limit of invocations."""
        self.spec(logical_id)  # a KeyError that names a function the template lacks
        slots = self._slots[logical_id]
        # A limit of 0 (ReservedConcurrentExecutions: 0) throttles every invocation, as on Lambda.
        if not slots.acquire(blocking=False):
            raise Throttled(logical_id, self.limits[logical_id])
        try:
            return self._invoke(logical_id, event)
        finally:
            slots.release()

    def _invoke(self, logical_id: str, event: Any) -> Any:
        try:
            loaded = self._load(logical_id)
        except FunctionError:
            raise
        except Exception as error:
            raise FunctionError(logical_id, "Runtime.ImportModuleError", str(error)) from error
        spec = self.specs[logical_id]
        try:
            payload = json.loads(json.dumps(event, default=_lambda_json))
        except (TypeError, ValueError) as error:
            raise FunctionError(logical_id, "InvalidRequestContentException", str(error)) from error
        context = LambdaContext(spec, loaded.log_stream_name)
        started = time.monotonic()
        try:
            with iam.acting_as(logical_id), ExitStack() as hooks:
                for hook in self.invocation_hooks:
                    hooks.enter_context(hook(spec, payload))
                result = loaded.handler(payload, context)
        except Exception as error:
            raise FunctionError(logical_id, type(error).__name__, str(error)) from error
        elapsed = time.monotonic() - started
        if self.enforce_timeouts and elapsed > spec.timeout_s:
            raise FunctionError(
                logical_id, "Sandbox.Timedout", f"Task timed out after {spec.timeout_s:.2f} seconds"
            )
        try:
            return json.loads(json.dumps(result, default=_lambda_json))
        except (TypeError, ValueError) as error:
            raise FunctionError(
                logical_id, "Runtime.MarshalError", f"Unable to marshal response: {error}"
            ) from error
