"""`make bench`: what a million requests with junk credentials cost a deployed stack.

Any `Authorization` value on an operator route runs the authorizer and then the route's function
(the authorizer lets every request through, so that the function can answer 401 in the operator
envelope), and random values miss the authorizer cache every time. This bench measures, in this
process against the embedded emulator, the warm duration and the log bytes of each function for
three kinds of junk, and prices a million of each with the list prices below, the one place they
are written (docs/operating.md shows this bench's output and says what it means):

- "not a key": `Bearer` and 40 random characters. The authorizer refuses it without a lookup.
- "a key's shape": `jpk_<random ULID>_<32 random characters>`. One GetItem that finds nothing.
- "refused at the authorizer": the first kind, if the authorizer answered `isAuthorized: false`
  for it; API Gateway's own 403 then, and the route's function never runs. Twice: billed by API
  Gateway as every request is, and not billed, as AWS support has said of failed authorizations
  (no pricing page says so for HTTP APIs).

Durations are billed per started millisecond, each invocation rounded up; the emulator's GetItem
is faster than DynamoDB's (a few milliseconds from Lambda), so the "key's shape" row is low by
about that. Lambda's own START/REPORT lines are not logged (the template's SystemLogLevel is WARN).
"""

from __future__ import annotations

import io
import json
import math
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from joinplane_local.template import TEMPLATE, load
from tests.support.lambda_context import http_event
from tests.support.runtime import local_runtime

# us-east-1 list prices at the time of writing.
PRICES = {
    "http_api_per_million": 1.00,  # API Gateway HTTP API, first 300 million requests a month
    "lambda_per_million": 0.20,  # Lambda requests
    "lambda_per_gb_second": 0.0000166667,  # Lambda duration, x86_64
    "dynamodb_per_million_rru": 0.125,  # on-demand reads; an eventually consistent GetItem is 0.5
    "logs_per_gb": 0.50,  # CloudWatch Logs ingestion, standard class
}
# CloudWatch Logs bills each event's bytes plus this much.
LOG_EVENT_OVERHEAD_BYTES = 26
# What API Gateway puts for each variable of the access log format, for a refused junk request.
ACCESS_LOG_VALUES = {
    "$context.requestId": "Xyz123abcDEF0gA=",
    "$context.identity.sourceIp": "203.0.113.77",
    "$context.requestTime": "01/Dec/2026:23:31:03 +0000",
    "$context.routeKey": "POST /api/compute/pools/list",
    "$context.status": "401",
    "$context.responseLength": "143",
    "$context.responseLatency": "24",
    "$context.integrationLatency": "11",
    "$context.integrationErrorMessage": "-",
    "$context.authorizer.error": "-",
}
ROUTE = "/api/compute/pools/list"
ROUTE_FUNCTION = "PoolsFunction"
AUTHORIZER = "AuthorizerFunction"
WARM_UP = 50
SAMPLES = 1000

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def not_a_key() -> str:
    return "".join(
        secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") for _ in range(40)
    )


def key_shaped() -> str:
    ulid = "01" + "".join(secrets.choice(_ALPHABET) for _ in range(24))
    return f"jpk_{ulid}_{''.join(secrets.choice(_ALPHABET) for _ in range(32))}"


def access_log_bytes() -> int:
    """One line of the template's access log format, with typical values, as billed."""
    template = load(TEMPLATE)
    line = str(template["Resources"]["HttpApi"]["Properties"]["AccessLogSettings"]["Format"])
    for variable in sorted(ACCESS_LOG_VALUES, key=len, reverse=True):
        line = line.replace(variable, ACCESS_LOG_VALUES[variable])
    assert "$context" not in line, line
    return len(line.encode()) + LOG_EVENT_OVERHEAD_BYTES


class Captured:
    """Everything written to file descriptor 1 meanwhile (powertools and EMF print to stdout)."""

    def __enter__(self) -> Captured:
        sys.stdout.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(1)
        os.dup2(self._file.fileno(), 1)
        return self

    def __exit__(self, *_: object) -> None:
        sys.stdout.flush()
        os.dup2(self._saved, 1)
        os.close(self._saved)
        self._file.seek(0)
        output = self._file.read()
        self._file.close()
        # As CloudWatch Logs bills them: each line, and each line's event overhead.
        self.bytes = len(output) + output.count(b"\n") * LOG_EVENT_OVERHEAD_BYTES


def measure(invoke: Callable[[], Any]) -> tuple[list[float], float]:
    """Warm durations in ms, and log bytes per invocation."""
    for _ in range(WARM_UP):
        invoke()
    durations = []
    with Captured() as captured:
        for _ in range(SAMPLES):
            started = time.perf_counter()
            invoke()
            durations.append((time.perf_counter() - started) * 1000)
    return durations, captured.bytes / SAMPLES


def billed(durations: list[float], memory_mb: int) -> float:
    """Duration dollars per million invocations: each rounded up to the millisecond."""
    seconds = statistics.fmean(math.ceil(d) for d in durations) / 1000
    return seconds * memory_mb / 1024 * PRICES["lambda_per_gb_second"] * 1_000_000


def main() -> int:
    with local_runtime(log=io.StringIO()) as runtime:
        functions = runtime.functions

        def authorizer(value: str) -> dict[str, Any]:
            event = http_event(ROUTE, b"", {"authorization": f"Bearer {value}"})
            event.update(type="REQUEST", identitySource=[f"Bearer {value}"])
            result: dict[str, Any] = functions.invoke(AUTHORIZER, event)
            return result

        def route(context: dict[str, Any]) -> None:
            answer = functions.invoke(ROUTE_FUNCTION, http_event(ROUTE, b'{"tenantId": "dev"}', {}, context))
            assert answer["statusCode"] == 401, answer

        rows = []
        memory = {name: functions.spec(name).memory_mb for name in (AUTHORIZER, ROUTE_FUNCTION)}
        for label, secret, reads in (("not a key", not_a_key, 0.0), ("a key's shape", key_shaped, 0.5)):
            auth_ms, auth_log = measure(lambda make=secret: authorizer(make()))
            context = authorizer(secret())["context"]
            assert context == {}, context
            route_ms, route_log = measure(lambda c=context: route(c))
            rows.append((label, auth_ms, auth_log, route_ms, route_log, reads))

    lines = [
        "| junk | function | median ms | p99 ms | billed ms (mean) | log bytes |",
        "|---|---|---|---|---|---|",
    ]
    costs = []
    for label, auth_ms, auth_log, route_ms, route_log, reads in rows:
        for name, durations, log_bytes in (
            (AUTHORIZER, auth_ms, auth_log),
            (ROUTE_FUNCTION, route_ms, route_log),
        ):
            quantiles = statistics.quantiles(durations, n=100)
            mean_billed = statistics.fmean(math.ceil(d) for d in durations)
            lines.append(
                f"| {label} | {name} | {statistics.median(durations):.2f} | {quantiles[98]:.2f} "
                f"| {mean_billed:.2f} | {log_bytes:.0f} |"
            )
        api = PRICES["http_api_per_million"]
        lambda_auth = PRICES["lambda_per_million"] + billed(auth_ms, memory[AUTHORIZER])
        lambda_route = PRICES["lambda_per_million"] + billed(route_ms, memory[ROUTE_FUNCTION])
        dynamodb = reads * PRICES["dynamodb_per_million_rru"]
        logs_auth = (auth_log + access_log_bytes()) / 1e9 * 1e6 * PRICES["logs_per_gb"]
        logs_route = route_log / 1e9 * 1e6 * PRICES["logs_per_gb"]
        costs.append((label, api, lambda_auth, dynamodb, logs_auth, lambda_route, logs_route))
        if label == "not a key":
            costs.append(("refused at the authorizer", api, lambda_auth, 0.0, logs_auth, 0.0, 0.0))
            # AWS has said in answers (never in the pricing pages) that it bills no request that
            # fails authorization: the price of the refusal if that holds for HTTP APIs too.
            costs.append(("refused, if API Gateway bills it not", 0.0, lambda_auth, 0.0, logs_auth, 0.0, 0.0))

    lines += [
        "",
        "| per million | HTTP API | authorizer | GetItem | logs (authorizer, access) | route function "
        "| logs (route) | total |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, *parts in costs:
        cells = " | ".join(f"${part:.3f}" for part in parts)
        lines.append(f"| {label} | {cells} | **${sum(parts):.2f}** |")
    lines += [
        "",
        f"prices: {json.dumps(PRICES)}; memory: {json.dumps(memory)} MB; {SAMPLES} warm samples each; "
        f"an access log line: {access_log_bytes()} bytes",
    ]
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
