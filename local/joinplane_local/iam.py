"""IAM as each deployed function meets it, for the functions run in this process.

Deployed, every DynamoDB and KMS call a function makes is checked by IAM against that function's
`Policies` in template.yaml. Locally nothing would check them, so a write the policy forbids would
pass every test and fail only in AWS (or, worse, a policy wider than the code needs would never be
noticed). This module evaluates the template's own statements for each call a function makes,
at call time, and refuses what IAM would refuse with IAM's error (`AccessDeniedException`), whose
message names the statement to add.

What is evaluated is IAM's own logic: the statements and the decision in `iam_policy`, what each
DynamoDB and KMS call asks for (action, resource, condition keys) in `iam_requests`; this module
runs them around each call a function's clients make and records the outcome.

Who is acting is the function whose handler runs (`acting_as`, set around each invocation); calls
made outside any handler (a test's setup, the local runtime's own workers) are not checked. Other
services (EventBridge) are not checked.

Every decision is also recorded (`calls`): which function did what to which key prefix, and which
statement allowed it; and every refusal (`denials`), so a refusal that code swallows (a best-effort
call) still fails the test that caused it.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from .iam_policy import ContextValue, Request, Statement, decide, like, statements_of
from .iam_requests import dynamodb_requests, kms_requests
from .template import Names, Template, load

FUNCTION_TYPE = "AWS::Serverless::Function"
CHECKED_SERVICES = ("dynamodb", "kms")

_acting: ContextVar[str | None] = ContextVar("joinplane_iam_acting", default=None)

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def acting_as(logical_id: str | None) -> Iterator[None]:
    """Calls made inside are checked against `logical_id`'s policy (None: not checked)."""
    token = _acting.set(logical_id)
    try:
        yield
    finally:
        _acting.reset(token)


def acting(logical_id: str, handler: F) -> F:
    """`handler`, run as `logical_id` (what Lambda's execution role is to the code)."""

    @functools.wraps(handler)
    def run(*args: Any, **kwargs: Any) -> Any:
        with acting_as(logical_id):
            return handler(*args, **kwargs)

    return run  # type: ignore[return-value]


class KeyFacts:
    """What IAM knows of a KMS key when a call names it (tags, spec, usage), read once per key
    with an unchecked call: a key's tags and spec never change here."""

    def __init__(self) -> None:
        self._facts: dict[str, tuple[str, dict[str, ContextValue]]] = {}
        self._lock = threading.Lock()

    def of(self, client: Any, key_id: str, names: Names) -> tuple[str, dict[str, ContextValue]]:
        with self._lock:
            known = self._facts.get(key_id)
        if known is not None:
            return known
        with acting_as(None):
            metadata = client.describe_key(KeyId=key_id)["KeyMetadata"]
            tags = client.list_resource_tags(KeyId=metadata["KeyId"]).get("Tags", [])
        context: dict[str, ContextValue] = {
            f"aws:ResourceTag/{tag['TagKey']}": str(tag["TagValue"]) for tag in tags
        }
        context["kms:KeySpec"] = str(metadata.get("KeySpec") or metadata.get("CustomerMasterKeySpec"))
        context["kms:KeyUsage"] = str(metadata["KeyUsage"])
        facts = (f"arn:aws:kms:{names.region}:{names.account}:key/{metadata['KeyId']}", context)
        with self._lock:
            self._facts[key_id] = facts
        return facts


# --- the record ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One authorization of a function's call, as recorded. `keys` is the `dynamodb:LeadingKeys`
    pattern of the allowing statement the partition key matched (`MACHINE#*`), or, refused, the
    key's prefix and `*`: it stands for the kind of item; `statement` is the index of the statement
    that allowed it (None: refused)."""

    function: str
    action: str
    resource: str
    keys: str
    attributes: tuple[str, ...]
    statement: int | None


def _pattern(statement: Statement | None, key: str) -> str:
    if statement is not None:
        for condition in statement.conditions:
            if condition.key.lower() == "dynamodb:leadingkeys":
                for pattern in condition.values:
                    if like(pattern, key):
                        return pattern
    return key_prefix(key) + "*"


def unused_grants(statements: Mapping[str, Sequence[Statement]], calls: set[Call]) -> list[str]:
    """Each (function, statement, action, partition key pattern) the template allows that no
    recorded call used: a grant wider than what the code was seen to need."""
    used = {(c.function, c.statement, c.action.lower(), c.keys) for c in calls if c.statement is not None}
    unused = []
    for function, granted in sorted(statements.items()):
        for statement in granted:
            if statement.effect != "Allow":
                continue
            patterns = [
                pattern
                for condition in statement.conditions
                if condition.key.lower() == "dynamodb:leadingkeys"
                for pattern in condition.values
            ] or [""]
            for action in statement.actions:
                if action.partition(":")[0] not in CHECKED_SERVICES:
                    continue
                for pattern in patterns:
                    if (function, statement.index, action.lower(), pattern) not in used:
                        where = f" on {pattern}" if pattern else ""
                        unused.append(f"{function} statement {statement.index + 1}: {action}{where}")
    return unused


def resource_kind(arn: str) -> str:
    """`table`, `index/gsi1`, `key`, `alias` or `*`: what a recorded call was made on."""
    if ":table/" in arn:
        index = arn.partition("/index/")[2]
        return f"index/{index}" if index else "table"
    return arn.rpartition(":")[2].partition("/")[0] or arn


def key_prefix(value: str) -> str:
    """`APIKEY#k_1` -> `APIKEY#`: the kind of item a partition key names (what LeadingKeys grants)."""
    head, sep, _ = value.partition("#")
    return head + sep if sep else value


class Denied(Exception):
    """What a refusal is reported as when code swallows the AccessDeniedException."""


def grant_hint(function: str, request: Request) -> str:
    """The statement that would allow `request`, in the template's YAML."""
    resource = request.resource
    if resource.startswith("arn:aws:dynamodb:"):
        index = resource.partition("/index/")[2]
        resource = f'!Sub "${{Table.Arn}}/index/{index}"' if index else "!GetAtt Table.Arn"
    elif resource.startswith("arn:aws:kms:"):
        resource = '!Sub "arn:${AWS::Partition}:kms:${AWS::Region}:${AWS::AccountId}:key/*"'
    if request.action.lower() == "kms:schedulekeydeletion" and function != "RetentionFunction":
        return (
            "do not grant it: only the retention job deletes KMS keys (docs/pki.md); record the key "
            "as abandoned instead (joinplane.ca_keys.schedule_key_deletion)"
        )
    lines = [
        f"add to {function}'s Policies in template.yaml (or widen its statement for this kind of item):",
        "  - Effect: Allow",
        f"    Action: {request.action}",
        f"    Resource: {resource}",
    ]
    prefixes = sorted({key_prefix(k) + "*" for k in request.leading_keys})
    if resource.startswith('!Sub "arn:${AWS::Partition}:kms:'):
        lines += [
            "    Condition:  # only this stack's CA keys, as every key statement",
            "      StringEquals:",
            '        "aws:ResourceTag/joinplane:stack": !Ref AWS::StackName',
            '        "kms:KeySpec": ECC_NIST_P256',
            '        "kms:KeyUsage": SIGN_VERIFY',
        ]
    if prefixes:
        lines += [
            "    Condition:",
            "      ForAllValues:StringLike:",
            f"        dynamodb:LeadingKeys: [{', '.join(repr(p) for p in prefixes)}]",
        ]
    return "\n".join(lines)


class Enforcement:
    """The template's policies, checked on each call of a function's clients."""

    def __init__(self, document: Mapping[str, Any] | None = None) -> None:
        self.document = dict(document if document is not None else load())
        self.calls: set[Call] = set()
        self.denials: list[str] = []
        self.keys = KeyFacts()
        # JOINPLANE_IAM_AUDIT_ONLY=1: refusals are recorded (and fail the tests) but the calls go
        # through, so one run of the suite lists every grant a change of policy lacks.
        self.audit_only = os.environ.get("JOINPLANE_IAM_AUDIT_ONLY") == "1"
        self._lock = threading.Lock()
        self._compiled: dict[tuple[str, str, str, str], tuple[Names, dict[str, list[Statement]]]] = {}

    def policies(self) -> tuple[Names, dict[str, list[Statement]]]:
        """The statements as the current environment resolves them: the table and stack the
        functions are configured with (tests swap tables; the stack tag is the KMS ABAC value)."""
        stack = os.environ.get("KMS_STACK_TAG", Names.stack)
        table = os.environ.get("TABLE_NAME", "")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or Names.region
        bus = os.environ.get("EVENT_BUS_NAME", "")
        cache_key = (stack, table, region, bus)
        compiled = self._compiled.get(cache_key)
        if compiled is None:
            names = Names(stack=stack, region=region, physical={"Table": table, "EventBus": bus})
            template = Template(self.document, names)
            compiled = (
                names,
                {fid: statements_of(template, fid) for fid in template.of_type(FUNCTION_TYPE)},
            )
            self._compiled[cache_key] = compiled
        return compiled

    def requests(
        self, names: Names, service: str, operation: str, params: Mapping[str, Any], client: Any
    ) -> list[Request]:
        if service == "dynamodb":
            return dynamodb_requests(operation, params, names)
        return kms_requests(operation, params, names, client, self.keys)

    def check(
        self, function: str, service: str, operation: str, params: Mapping[str, Any], client: Any
    ) -> None:
        """Raise IAM's AccessDeniedException unless `function`'s policy allows every authorization
        the call needs."""
        names, policies = self.policies()
        statements = policies.get(function)
        if statements is None:
            raise KeyError(f"no AWS::Serverless::Function {function!r} in the template")
        for request in self.requests(names, service, operation, params, client):
            allowed = decide(statements, request)
            patterns = [_pattern(allowed, k) for k in request.leading_keys] or [""]
            attributes = request.context.get("dynamodb:Attributes", ())
            with self._lock:
                for pattern in patterns:
                    self.calls.add(
                        Call(
                            function,
                            request.action,
                            resource_kind(request.resource),
                            pattern,
                            (attributes,) if isinstance(attributes, str) else tuple(attributes),
                            None if allowed is None else allowed.index,
                        )
                    )
            if allowed is None:
                message = (
                    f"{function} is not authorized to perform: {request.action} on resource: "
                    f"{request.resource}"
                    + (f" (partition keys {list(request.leading_keys)})" if request.leading_keys else "")
                    + f" because no statement of its policy allows it.\n{grant_hint(function, request)}"
                )
                with self._lock:
                    self.denials.append(message)
                if self.audit_only:
                    continue
                from botocore.exceptions import ClientError

                raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": message}}, operation)

    def take_denials(self) -> list[str]:
        with self._lock:
            taken, self.denials = self.denials, []
        return taken

    def hook(self, service: str, client: Any) -> None:
        """For `joinplane.aws.on_client`: check this client's calls whenever a function is acting."""
        if service not in CHECKED_SERVICES:
            return

        def before(params: Mapping[str, Any], model: Any, **_: Any) -> None:
            function = _acting.get()
            if function is not None:
                self.check(function, service, model.name, params, client)

        client.meta.events.register(
            f"before-parameter-build.{client.meta.service_model.service_id.hyphenize()}", before
        )


_installed: list[Enforcement] = []


def install(document: Mapping[str, Any] | None = None) -> Enforcement:
    """Check every client made from now on (once per process; clients already made are forgotten
    by `joinplane.container.reset()`, which whoever installs calls next)."""
    from joinplane import aws

    if not _installed:
        _installed.append(Enforcement(document))
        aws.on_client(_installed[0].hook)
    return _installed[0]


def installed() -> Enforcement | None:
    return _installed[0] if _installed else None
