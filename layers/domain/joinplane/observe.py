"""What an on-call engineer sees: one JSON log line per decision and CloudWatch metrics in EMF.

Both are powertools' (Logger, single_metric), printed to stdout: Lambda sends stdout to the
function's log group, where CloudWatch extracts the metrics from the EMF lines, and the local
runtime prints the very same lines, so `make run` shows what CloudWatch would. Measured on the
built functions (Lambda's python3.11 layout, boto3 already loaded): importing and creating both
adds 6-10 ms to a cold start, so the light-logger alternative was not needed.

Why single_metric and not a Metrics flushed at the end of the invocation: powertools' Metrics keeps
one metric set per process, which the local runtime's concurrent in-process invocations would
share; a single metric is printed where it happens and shares nothing.

Correlation: the HTTP router and the authorizer `bind` the API Gateway request id and the route for
the invocation (a ContextVar, so concurrent local invocations keep their own), and every line
carries them. Fields are named as in the events (tenantId, poolId, requestId...); `correlationId`
is API Gateway's request id, what the access log calls `requestId`.

Secrets: callers pass ids only. As a second line of defence a value shaped like a join token or
API key secret is replaced before it is written.
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools.logging.logger import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from joinplane.ids import BASE32, ULID_PATTERN

SERVICE = "joinplane"
SECRET_CHARS = 32  # joinplane.credentials.SECRET_CHARS (not imported: it loads `secrets` and hmac)

# Every metric Joinplane emits, with its unit; the one dimension besides `service` is `outcome`.
# Dimensions stay low-cardinality: outcomes and reason codes, never tenant, pool or machine ids.
# template.yaml's alarms and dashboard name these (tests/operability holds them to this table).
METRICS: dict[str, str] = {
    "Joins": "Count",  # admitted | deferred | denied | refused
    "Renewals": "Count",  # renewed (same key) | rotated (onto a new key) | refused
    "RequestDecisions": "Count",  # approval-recorded | approved | rejected | consumed | expired
    "Revocations": "Count",  # revoked
    "ClusterJoins": "Count",  # joined | refused
    "AuthorizerRefusals": "Count",  # the refusal's reason code
    "EventsPublished": "Count",  # published
    "EventsFailed": "Count",  # failed
    "PublisherLag": "Milliseconds",  # published: a stream record's age when its event was published
    "RecordsSetAside": "Count",  # undecodable
    "UnhandledErrors": "Count",  # internal: a bug answered as a 500, which Lambda's Errors never counts
    "AdminActions": "Count",  # the action, e.g. join-token.created
}

# The shape of every minted secret (joinplane.credentials): `<prefix>_<ULID>_<32 base32 chars>`.
_SECRET = re.compile(f"[a-z]+_{ULID_PATTERN}_{BASE32}{{{SECRET_CHARS}}}")

_UNBOUND: dict[str, Any] = {}
_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "joinplane_log_context", default=_UNBOUND
)


class _Stdout(logging.StreamHandler):  # type: ignore[type-arg]
    """stdout as it is when a line is written, not when the logger was made: the local runtime and
    tests replace sys.stdout, and Lambda's is the same either way."""

    @property
    def stream(self) -> Any:
        return sys.stdout

    @stream.setter
    def stream(self, _: Any) -> None:
        pass

    def format(self, record: logging.LogRecord) -> str:
        # The whole line, tracebacks and nested values included: the last place a secret is stopped.
        return _SECRET.sub("[redacted]", super().format(record))


logger = Logger(
    service=SERVICE,
    # Unset: powertools takes the template's LogLevel from Lambda (AWS_LAMBDA_LOG_LEVEL), else INFO.
    level=None,
    logger_handler=_Stdout(),
    # RFC 3339 in UTC, as Lambda's own JSON lines and our events write time.
    utc=True,
    datefmt="%Y-%m-%dT%H:%M:%S.%FZ",
)
# Our lines are written once, by the handler above: Lambda's own root handler (and any other)
# would write each again in its own format.
logging.getLogger(SERVICE).propagate = False


def _clean(fields: dict[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None or value == "":
            continue
        if isinstance(value, str) and _SECRET.search(value):
            value = _SECRET.sub("[redacted]", value)
        clean[key] = value
    return clean


_decided: contextvars.ContextVar[bool] = contextvars.ContextVar("joinplane_decided", default=False)


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Add `fields` to every line written inside the block (one invocation, one request)."""
    token = _context.set({**_context.get(), **_clean(fields)})
    decided = _decided.set(False)
    try:
        yield
    finally:
        _decided.reset(decided)
        _context.reset(token)


def decided() -> bool:
    """Whether this invocation's outcome already has its decision line (the router then does not
    write a second line for the same refusal)."""
    return _decided.get()


def note(**fields: Any) -> None:
    """Add what became known mid-invocation (the token's tenant and pool...) to its later lines.
    Only inside `bound`: its dict belongs to this invocation alone."""
    current = _context.get()
    if current is not _UNBOUND:
        current.update(_clean(fields))


def log(level: str, message: str, *, _caller: int = 1, **fields: Any) -> None:
    # stacklevel: the line's `location` is where the decision was made, not this module.
    getattr(logger, level.lower())(
        message,
        extra={**_context.get(), **_clean(fields)},
        stacklevel=2 + _caller,
    )


def exception(message: str, **fields: Any) -> None:
    """An ERROR line with the traceback of the exception being handled."""
    logger.exception(message, extra={**_context.get(), **_clean(fields)}, stacklevel=3)


def count(metric: str, value: float = 1, unit: str | None = None, **dimensions: str) -> None:
    """One EMF blob: `metric` = `value`, with `dimensions` (and service)."""
    namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Joinplane/local")
    with single_metric(
        name=metric,
        unit=MetricUnit(unit or METRICS[metric]),
        value=value,
        namespace=namespace,
        default_dimensions={"service": SERVICE, **dimensions},
    ):
        pass


def decision(message: str, metric: str, outcome: str, **fields: Any) -> None:
    """A decision: its JSON line (message, outcome and ids) and one count of `metric` by outcome.
    A dry run (`note(dryRun=True)`) decides nothing: its line is written, no metric counted."""
    log("INFO", message, _caller=2, outcome=outcome, **fields)
    _decided.set(True)
    if not _context.get().get("dryRun"):
        count(metric, outcome=outcome)
