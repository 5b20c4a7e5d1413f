"""docs/deploy.md's generated section, from template.yaml: every parameter with its default and
effect, the AWS services the stack creates resources in, what an idle deployment pays for each
month (its alarms, dashboard and keys, counted from the template) and what a million joins cost,
at the list prices of `joinplane_local.prices` (the one copy of them, which `make cost` uses too).

    python -m joinplane_local.deploydoc           # print the section
    python -m joinplane_local.deploydoc --write   # replace it in docs/deploy.md

Run `--write` after changing template.yaml's parameters or resources; the operability tests
fail while the page differs from this output.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import prices
from .template import ROOT, TEMPLATE, load

PAGE = ROOT / "docs" / "deploy.md"
BEGIN = "<!-- deploydoc:begin (python -m joinplane_local.deploydoc --write) -->"
END = "<!-- deploydoc:end -->"

# us-east-1 list prices in USD, as read on PRICES_READ from each service's pricing page
# (https://aws.amazon.com/<service>/pricing/), free tiers left out: joinplane_local.prices.
PRICES_READ = prices.PRICES_READ


@dataclass(frozen=True)
class Price:
    usd: float
    per: str
    service: str


PRICES = {
    "alarm": Price(
        prices.CLOUDWATCH_ALARM_MONTH, "alarm metric per month (standard resolution)", "CloudWatch"
    ),
    "dashboard": Price(
        prices.CLOUDWATCH_DASHBOARD_MONTH,
        "dashboard per month, beyond the account's 3 free ones",
        "CloudWatch",
    ),
    "logs": Price(prices.LOGS_INGESTED_GB, "GB of log lines ingested", "CloudWatch Logs"),
    "kms_key": Price(prices.KMS_KEY_MONTH, "customer managed key per month", "KMS"),
    "kms_sign": Price(prices.KMS_ASYMMETRIC_REQUEST, "asymmetric request (kms:Sign)", "KMS"),
    "http_api": Price(prices.APIGATEWAY_HTTP_REQUEST, "HTTP API request", "API Gateway"),
    "lambda_request": Price(prices.LAMBDA_REQUEST, "invocation", "Lambda"),
    "lambda_gb_second": Price(prices.LAMBDA_GB_SECOND["x86_64"], "GB-second, x86_64", "Lambda"),
    "write": Price(prices.DYNAMODB_WRU, "write request unit, on-demand", "DynamoDB"),
    "read": Price(prices.DYNAMODB_RRU, "read request unit, on-demand", "DynamoDB"),
    "event": Price(prices.EVENTBRIDGE_EVENT, "custom event published", "EventBridge"),
    "secret": Price(prices.SECRET_MONTH, "secret per month (the webhook connection's)", "Secrets Manager"),
}

# One admitted join with a certificate, warm function (docs/join.md, "What each path costs"):
# the assumptions the per-million table multiplies out. Item sizes as the local runtime writes
# them, each under 1 KB (machine with its certificate 967 B, token 517 B, identity 354 B, audit
# record ~600 B); a transaction's item costs 2 write units per KB, an index entry 1.
JOIN_MS = 100  # MachineJoin's billed duration, one kms:Sign included
SMALL_MS = 20  # the stream publisher's and the audit consumer's share of an invocation
# token, pool check, identity, machine and 2 hardware claims (a MAC and a serial), then the
# token's and the machine's index entries
JOIN_WRITE_UNITS = 2 * 6 + 2
AUDIT_WRITE_UNITS = 2  # the audit consumer's record and its index entry
JOIN_READ_UNITS = 1  # the token
JOIN_EVENTS = 1  # security.machine.joined
JOIN_LOG_KB = 2.0  # the decision line, its EMF blob, the access-log line, Lambda's START/REPORT lines

# The IAM service prefix `sam deploy` needs for each resource type the template declares (SAM's
# own types expand into the resources named in the comment).
SERVICES = {
    "AWS::Serverless::Function": "lambda, iam (its role), logs",
    "AWS::Serverless::LayerVersion": "lambda",
    "AWS::Serverless::HttpApi": "apigateway",
    "AWS::CloudWatch::Alarm": "cloudwatch",
    "AWS::CloudWatch::Dashboard": "cloudwatch",
    "AWS::DynamoDB::Table": "dynamodb",
    "AWS::Events::ApiDestination": "events",
    "AWS::Events::Connection": "events, secretsmanager (the connection's secret)",
    "AWS::Events::EventBus": "events",
    "AWS::Events::Rule": "events",
    "AWS::IAM::Role": "iam",
    "AWS::KMS::Key": "kms",
    "AWS::Logs::LogGroup": "logs",
    "AWS::SNS::Subscription": "sns",
    "AWS::SNS::Topic": "sns",
    "AWS::SNS::TopicPolicy": "sns",
    "AWS::SQS::Queue": "sqs",
    "AWS::SQS::QueuePolicy": "sqs",
}
RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
MINUTES = {"minute": 1, "hour": 60, "day": 1440}
MONTH_MINUTES = 30 * 1440


def money(usd: float) -> str:
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.6f}".rstrip("0")


def shown(usd: float) -> str:
    """A price as its pricing page says it: per unit, or per million for the small ones."""
    return money(usd) if usd >= 0.01 else f"${usd * 1e6:,.4g} per million"


def one_line(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def parameters(document: dict[str, Any]) -> list[str]:
    rows = ["| parameter | default | effect |", "|---|---|---|"]
    for name, spec in document["Parameters"].items():
        if "Description" not in spec:
            raise ValueError(f"template.yaml: parameter {name} has no Description (the page shows it)")
        default = spec.get("Default")
        shown = "(empty)" if default == "" else "(required)" if default is None else f"`{default}`"
        allowed = spec.get("AllowedValues")
        effect = one_line(spec["Description"])
        if allowed:
            effect += " One of " + ", ".join(f"`{v}`" for v in allowed) + "."
        if spec.get("NoEcho"):
            effect += " NoEcho."
        rows.append(f"| `{name}` | {shown} | {effect} |")
    return rows


def services(document: dict[str, Any]) -> list[str]:
    kinds = sorted({r["Type"] for r in document["Resources"].values()})
    unknown = [k for k in kinds if k not in SERVICES]
    if unknown:
        raise ValueError(f"joinplane_local.deploydoc.SERVICES: add the IAM service of {', '.join(unknown)}")
    prefixes = sorted(
        {p.split(" ")[0] for k in kinds for p in SERVICES[k].split(", ")} | {"cloudformation", "s3"}
    )
    return [
        "`sam deploy` creates resources in these services (its caller needs to create, update, tag and "
        "delete them, and `iam:PassRole` for the functions' roles): "
        + ", ".join(f"`{p}`" for p in prefixes)
        + ". `cloudformation` runs the deployment, `s3` holds the packaged code (`resolve_s3`).",
        "",
        "| resource type | count | IAM service |",
        "|---|---:|---|",
        *(
            f"| `{kind}` | {sum(1 for r in document['Resources'].values() if r['Type'] == kind)} | "
            f"{SERVICES[kind]} |"
            for kind in kinds
        ),
    ]


@dataclass(frozen=True)
class Idle:
    alarms: int
    alarm_metrics: int
    webhook_alarms: int
    webhook_alarm_metrics: int
    dashboards: int
    keys: int
    secrets: int
    scheduled_runs: int
    memory_gb: float


def alarm_metrics(alarm: dict[str, Any]) -> int:
    """What CloudWatch bills an alarm for: each metric it reads (a metric-math alarm reads several;
    its expressions are free)."""
    metrics = alarm["Properties"].get("Metrics")
    return 1 if metrics is None else sum(1 for m in metrics if "MetricStat" in m)


def function_memory_gb(document: dict[str, Any], logical_id: str) -> float:
    default = document.get("Globals", {}).get("Function", {}).get("MemorySize", 128)
    return float(document["Resources"][logical_id]["Properties"].get("MemorySize", default)) / 1024


def idle(document: dict[str, Any]) -> Idle:
    resources = document["Resources"]

    def of(kind: str, conditional: bool) -> list[dict[str, Any]]:
        return [r for r in resources.values() if r["Type"] == kind and ("Condition" in r) == conditional]

    runs, memory = 0, 0.0
    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event in resource["Properties"].get("Events", {}).values():
            if event["Type"] == "Schedule":
                found = RATE.match(str(event["Properties"]["Schedule"]))
                if not found:
                    raise ValueError(f"{logical_id}: only rate(N unit) schedules are costed here")
                every = int(found.group(1)) * MINUTES[found.group(2).rstrip("s")]
                runs += MONTH_MINUTES // every
                memory = max(memory, function_memory_gb(document, logical_id))
    return Idle(
        alarms=len(of("AWS::CloudWatch::Alarm", False)),
        alarm_metrics=sum(alarm_metrics(a) for a in of("AWS::CloudWatch::Alarm", False)),
        webhook_alarms=len(of("AWS::CloudWatch::Alarm", True)),
        webhook_alarm_metrics=sum(alarm_metrics(a) for a in of("AWS::CloudWatch::Alarm", True)),
        dashboards=len(of("AWS::CloudWatch::Dashboard", False)),
        keys=len(of("AWS::KMS::Key", False)),
        secrets=len(of("AWS::Events::Connection", True)),
        scheduled_runs=runs,
        memory_gb=memory,
    )


def idle_rows(cost: Idle) -> list[str]:
    alarm, dashboard, key = PRICES["alarm"].usd, PRICES["dashboard"].usd, PRICES["kms_key"].usd
    schedule = cost.scheduled_runs * (
        PRICES["lambda_request"].usd + SMALL_MS / 1000 * cost.memory_gb * PRICES["lambda_gb_second"].usd
    )
    base = [
        (f"{cost.alarms} alarms reading {cost.alarm_metrics} metrics", cost.alarm_metrics * alarm),
        (f"{cost.dashboards} dashboard", cost.dashboards * dashboard),
        (f"{cost.keys} KMS key (the alarm topic's)", cost.keys * key),
        (f"{cost.scheduled_runs:,} scheduled runs of the retention job, {SMALL_MS} ms each", schedule),
    ]
    total = sum(usd for _, usd in base)
    webhook = cost.webhook_alarm_metrics * alarm + cost.secrets * PRICES["secret"].usd
    return [
        "| what | per month |",
        "|---|---:|",
        *(f"| {what} | {money(usd)} |" for what, usd in base),
        f"| **an idle deployment** | **{money(total)}** |",
        f"| each pool CA's KMS key, while it is in the pool's bundle | {money(key)} |",
        f"| with `WebhookUrl` set: {cost.webhook_alarms} more alarm and the connection's secret | "
        f"{money(webhook)} |",
    ]


def join_rows(document: dict[str, Any]) -> list[str]:
    join_gb = function_memory_gb(document, "MachineJoinFunction")
    small_gb = max(
        function_memory_gb(document, f) for f in ("EventPublisherFunction", "AuditConsumerFunction")
    )
    p = {name: price.usd * 1_000_000 for name, price in PRICES.items()}
    rows = [
        ("API Gateway: 1 request", p["http_api"]),
        ("Lambda: 3 invocations (join, stream publisher, audit consumer)", 3 * p["lambda_request"]),
        (
            f"Lambda: {JOIN_MS} ms at {join_gb:g} GB, 2 x {SMALL_MS} ms at {small_gb:g} GB",
            (JOIN_MS / 1000 * join_gb + 2 * SMALL_MS / 1000 * small_gb) * p["lambda_gb_second"],
        ),
        (
            f"DynamoDB: {JOIN_WRITE_UNITS + AUDIT_WRITE_UNITS} write units (the join's transaction, "
            "the audit record)",
            (JOIN_WRITE_UNITS + AUDIT_WRITE_UNITS) * p["write"],
        ),
        (f"DynamoDB: {JOIN_READ_UNITS} read unit (the token)", JOIN_READ_UNITS * p["read"]),
        (f"EventBridge: {JOIN_EVENTS} event", JOIN_EVENTS * p["event"]),
        ("KMS: 1 `kms:Sign` (the certificate)", p["kms_sign"]),
        (f"CloudWatch Logs: {JOIN_LOG_KB:g} KB of log lines", JOIN_LOG_KB / 1024 / 1024 * p["logs"]),
    ]
    total = sum(usd for _, usd in rows)
    return [
        "| per million joins | USD |",
        "|---|---:|",
        *(f"| {what} | {money(usd)} |" for what, usd in rows),
        f"| **a million admitted joins** | **{money(total)}** |",
    ]


def render(template: Path = TEMPLATE) -> str:
    document = load(template)
    price_rows = ["| service | price (USD) | per |", "|---|---:|---|"] + [
        f"| {price.service} | {shown(price.usd)} | {price.per} |" for price in PRICES.values()
    ]
    lines = [
        BEGIN,
        "### Parameters",
        "",
        *parameters(document),
        "",
        "### What `sam deploy` creates",
        "",
        *services(document),
        "",
        f"### Prices (us-east-1 list prices, read {PRICES_READ})",
        "",
        *price_rows,
        "",
        "### An idle deployment, per month",
        "",
        *idle_rows(idle(document)),
        "",
        "### A million joins",
        "",
        *join_rows(document),
        END,
    ]
    return "\n".join(lines) + "\n"


def replace_section(page: str, section: str) -> str:
    if BEGIN not in page or END not in page:
        raise ValueError(f"{PAGE.name} has no section between {BEGIN} and {END}")
    before, rest = page.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    return before + section.rstrip("\n") + after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m joinplane_local.deploydoc", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--write", action="store_true", help=f"replace the section in {PAGE.relative_to(ROOT)}"
    )
    args = parser.parse_args(argv)
    try:
        section = render()
        if args.write:
            PAGE.write_text(replace_section(PAGE.read_text(), section))
        else:
            sys.stdout.write(section)
    except (OSError, ValueError) as error:
        print(f"python -m joinplane_local.deploydoc: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
