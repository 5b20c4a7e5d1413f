"""IAM as each deployed function meets it, for the functions run in this process.

Deployed, every DynamoDB and KMS call a function makes is checked by IAM against that function's
`Policies` in template.yaml. Locally nothing would check them, so a write the policy forbids would
pass every test and fail only in AWS (or, worse, a policy wider than the code needs would never be
noticed). This module evaluates the template's own statements for each call a function makes,
at call time, and refuses what IAM would refuse with IAM's error (`AccessDeniedException`), whose
message names the statement to add.

What is evaluated, as IAM does it:
- Action (wildcards), Resource (the table's ARN, `<table>/index/<name>` for a query of an index,
  a KMS key's or alias's ARN), explicit Deny before Allow.
- DynamoDB: a transaction is authorized action by action (Put, Update, Delete as PutItem,
  UpdateItem, DeleteItem, a ConditionCheck as ConditionCheckItem, with
  `dynamodb:EnclosingOperation` = TransactWriteItems); `dynamodb:LeadingKeys` is the partition key
  value (of the index, for a query of an index; every key's, for BatchGetItem);
  `dynamodb:Attributes` the top-level attribute names a write names (the item's, and those of its
  update and condition expressions: IAM cannot tell an attribute read by a condition from one
  written); `dynamodb:ReturnValues`.
- KMS: `aws:ResourceTag/<key>`, `kms:KeySpec`, `kms:KeyUsage` of the key a call names;
  `aws:RequestTag/<key>`, `aws:TagKeys` of a CreateKey (which also needs kms:TagResource for its
  tags) ; a CreateAlias needs the alias and the key.
- Condition operators String(Not)Equals, String(Not)Like, with `ForAllValues:`/`ForAnyValue:` and
  `...IfExists`; a missing key makes ForAllValues true and a plain operator false, as in IAM.

Who is acting is the function whose handler runs (`acting_as`, set around each invocation); calls
made outside any handler (a test's setup, the local runtime's own workers) are not checked. Other
services (EventBridge) are not checked.

Every decision is also recorded (`calls`): which function did what to which key prefix, and which
statement allowed it; and every refusal (`denials`), so a refusal that code swallows (a best-effort
call) still fails the test that caused it.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

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


# --- statements ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    operator: str  # as written, e.g. ForAllValues:StringLike
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Statement:
    function: str
    index: int  # position among the function's statements, from 0
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    conditions: tuple[Condition, ...]
    source: Mapping[str, Any] = field(compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        # IAM matches actions case-insensitively: compared lower-cased on both sides.
        object.__setattr__(self, "actions", tuple(a.lower() for a in self.actions))


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def statements_of(template: Template, logical_id: str) -> list[Statement]:
    """The function's inline policy statements, intrinsics resolved with the template's names. A
    policy form this module cannot read (a SAM policy template, a managed policy) is an error:
    its grants would go unchecked."""
    props = template.resources[logical_id].get("Properties", {})
    statements: list[Statement] = []
    for policy in props.get("Policies") or []:
        if not isinstance(policy, dict) or set(policy) != {"Statement"}:
            raise ValueError(
                f"{logical_id}: only inline `- Statement:` policies are evaluated, not {policy!r}"
            )
        for raw in policy["Statement"]:
            resolved = template.resolve(raw)
            if "NotAction" in resolved or "NotResource" in resolved:
                raise ValueError(f"{logical_id}: NotAction/NotResource are not evaluated")
            conditions = tuple(
                Condition(operator, key, _strings(values))
                for operator, block in (resolved.get("Condition") or {}).items()
                for key, values in block.items()
            )
            statements.append(
                Statement(
                    function=logical_id,
                    index=len(statements),
                    effect=str(resolved.get("Effect", "Allow")),
                    actions=_strings(resolved["Action"]),
                    resources=_strings(resolved["Resource"]),
                    conditions=conditions,
                    source=raw,
                )
            )
    return statements


# --- requests -----------------------------------------------------------------------------------


ContextValue = str | tuple[str, ...]


@dataclass(frozen=True)
class Request:
    """One authorization IAM makes: an action on a resource, with the request's condition keys."""

    action: str
    resource: str
    context: Mapping[str, ContextValue]

    @property
    def leading_keys(self) -> tuple[str, ...]:
        value = self.context.get("dynamodb:LeadingKeys", ())
        return (value,) if isinstance(value, str) else value


@functools.cache
def _matcher(pattern: str) -> Callable[[str], Any]:
    return re.compile(fnmatch.translate(pattern.replace("[", "[[]"))).match


def _like(pattern: str, value: str) -> bool:
    """IAM's StringLike: `*` any run of characters (`/` and `#` too), `?` one character."""
    return pattern == value or (("*" in pattern or "?" in pattern) and _matcher(pattern)(value) is not None)


def _matches_action(pattern: str, action: str) -> bool:
    """Actions are case-insensitive; both sides are lower-cased where they are made."""
    return _like(pattern, action)


_BASE = {
    "StringEquals": lambda p, v: p == v,
    "StringLike": _like,
    "StringNotEquals": lambda p, v: p == v,
    "StringNotLike": _like,
}


def _holds(condition: Condition, context: Mapping[str, ContextValue]) -> bool:
    operator = condition.operator
    quantifier, _, base = operator.rpartition(":")
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if base not in _BASE or quantifier not in ("", "ForAllValues", "ForAnyValue"):
        raise ValueError(f"condition operator {operator!r} is not evaluated")
    negated = "Not" in base
    match = _BASE[base]
    value = context.get(condition.key)
    if value is None:  # condition keys are case-insensitive
        wanted = condition.key.lower()
        value = next((v for k, v in context.items() if k.lower() == wanted), None)
    if value is None:
        if quantifier == "ForAllValues" or if_exists:
            return True
        return negated and quantifier == ""
    values = (value,) if isinstance(value, str) else value

    def one(v: str) -> bool:
        hit = any(match(p, v) for p in condition.values)
        return not hit if negated else hit

    if quantifier == "ForAllValues":
        return all(one(v) for v in values)
    if quantifier == "ForAnyValue":
        return any(one(v) for v in values)
    if not isinstance(value, str):
        raise ValueError(
            f"{condition.key} has several values here: {operator} needs ForAllValues: or ForAnyValue:"
        )
    return one(value)


def _applies(statement: Statement, request: Request) -> bool:
    action = request.action.lower()
    return (
        any(_matches_action(a, action) for a in statement.actions)
        and any(_like(r, request.resource) for r in statement.resources)
        and all(_holds(c, request.context) for c in statement.conditions)
    )


def decide(statements: Sequence[Statement], request: Request) -> Statement | None:
    """The statement that allows `request`, or None when IAM would refuse it."""
    allowed: Statement | None = None
    for statement in statements:
        if _applies(statement, request):
            if statement.effect == "Deny":
                return None
            allowed = allowed or statement
    return allowed


# --- what a call asks for -----------------------------------------------------------------------

_WORD = re.compile(r"(?<![.\w#:\[])(#?[A-Za-z_][\w-]*)(\s*\()?")
_KEYWORDS = frozenset({"and", "or", "not", "between", "in", "set", "remove", "add", "delete"})


def expression_attributes(expression: str | None, names: Mapping[str, str] | None) -> set[str]:
    """The top-level attribute names an expression names (placeholders resolved)."""
    if not expression:
        return set()
    return {(names or {}).get(word, word) for word in _expression_words(expression)}


@functools.lru_cache(maxsize=4096)
def _expression_words(expression: str) -> frozenset[str]:
    """The words of an expression that name attributes (`#placeholders` unresolved): the dal
    writes a few dozen expressions, each parsed once."""
    return frozenset(
        word for word, call in _WORD.findall(expression) if not call and word.lower() not in _KEYWORDS
    )


# The partition key attribute of the table and of each index (template.yaml's key schema).
PARTITION_KEYS = {None: "pk", "gsi1": "gsi1pk", "gsi2": "gsi2pk"}


def _scalar(value: Mapping[str, Any]) -> str:
    (kind, raw), *_ = value.items()
    return str(raw) if kind in ("S", "N") else repr(raw)


def _write_context(
    operation: str, action: Mapping[str, Any], pk: str, enclosing: str | None
) -> dict[str, ContextValue]:
    names = action.get("ExpressionAttributeNames")
    attributes = set(action.get("Item") or {})
    attributes |= expression_attributes(action.get("UpdateExpression"), names)
    attributes |= expression_attributes(action.get("ConditionExpression"), names)
    context: dict[str, ContextValue] = {"dynamodb:LeadingKeys": (pk,)}
    if attributes:
        context["dynamodb:Attributes"] = tuple(sorted(attributes))
    if action.get("ReturnValues"):
        context["dynamodb:ReturnValues"] = str(action["ReturnValues"])
    if enclosing:
        context["dynamodb:EnclosingOperation"] = enclosing
    return context


def dynamodb_requests(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    def table_arn(table: str) -> str:
        return f"arn:aws:dynamodb:{names.region}:{names.account}:table/{table}"

    def pk_of(action: Mapping[str, Any]) -> str:
        key = action.get("Item") or action.get("Key") or {}
        return _scalar(key["pk"]) if "pk" in key else ""

    if operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        arn = table_arn(params["TableName"])
        if operation == "GetItem":
            return [Request(f"dynamodb:{operation}", arn, {"dynamodb:LeadingKeys": (pk_of(params),)})]
        return [Request(f"dynamodb:{operation}", arn, _write_context(operation, params, pk_of(params), None))]
    if operation == "TransactWriteItems":
        kinds = {
            "Put": "PutItem",
            "Update": "UpdateItem",
            "Delete": "DeleteItem",
            "ConditionCheck": "ConditionCheckItem",
        }
        requests = []
        for entry in params["TransactItems"]:
            ((kind, action),) = entry.items()
            requests.append(
                Request(
                    f"dynamodb:{kinds[kind]}",
                    table_arn(action["TableName"]),
                    _write_context(kinds[kind], action, pk_of(action), "TransactWriteItems"),
                )
            )
        return requests
    if operation == "BatchGetItem":
        return [
            Request(
                "dynamodb:BatchGetItem",
                table_arn(table),
                {"dynamodb:LeadingKeys": tuple(sorted({pk_of({"Key": k}) for k in spec["Keys"]}))},
            )
            for table, spec in params["RequestItems"].items()
        ]
    if operation == "Query":
        index = params.get("IndexName")
        arn = table_arn(params["TableName"]) + (f"/index/{index}" if index else "")
        partition = PARTITION_KEYS.get(index, f"{index}pk")
        attribute_names = params.get("ExpressionAttributeNames") or {}
        values = params.get("ExpressionAttributeValues") or {}
        leading: tuple[str, ...] = ()
        for left, right in re.findall(r"(#?\w+)\s*=\s*(:\w+)", params.get("KeyConditionExpression", "")):
            if attribute_names.get(left, left) == partition and right in values:
                leading = (_scalar(values[right]),)
        if not leading:
            # IAM's ForAllValues would hold over no key at all: refuse to guess instead.
            raise ValueError(
                f"no equality on {partition} in KeyConditionExpression "
                f"{params.get('KeyConditionExpression')!r}"
            )
        return [Request("dynamodb:Query", arn, {"dynamodb:LeadingKeys": leading})]
    # Scan, TransactGetItems, BatchWriteItem, table management: no item-level keys modelled; the
    # action on the table must be granted outright.
    table = params.get("TableName") or next(iter(params.get("RequestItems") or {"*": None}))
    return [Request(f"dynamodb:{operation}", table_arn(str(table)), {})]


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


def kms_requests(
    operation: str, params: Mapping[str, Any], names: Names, client: Any, keys: KeyFacts
) -> list[Request]:
    action = f"kms:{operation}"
    if operation == "CreateKey":
        tags = {str(t["TagKey"]): str(t["TagValue"]) for t in params.get("Tags") or []}
        context: dict[str, ContextValue] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
        if tags:
            context["aws:TagKeys"] = tuple(sorted(tags))
        context["kms:KeySpec"] = str(params.get("KeySpec", "SYMMETRIC_DEFAULT"))
        context["kms:KeyUsage"] = str(params.get("KeyUsage", "ENCRYPT_DECRYPT"))
        requests = [Request(action, "*", context)]
        if tags:
            tag_context = {k: v for k, v in context.items() if k.startswith("aws:")}
            new_key = f"arn:aws:kms:{names.region}:{names.account}:key/*"
            requests.append(Request("kms:TagResource", new_key, tag_context))
        return requests
    if operation == "CreateAlias":
        alias = f"arn:aws:kms:{names.region}:{names.account}:{params['AliasName']}"
        key_arn, key_context = keys.of(client, str(params["TargetKeyId"]), names)
        return [Request(action, alias, {}), Request(action, key_arn, key_context)]
    if "KeyId" in params:
        key_arn, key_context = keys.of(client, str(params["KeyId"]), names)
        return [Request(action, key_arn, key_context)]
    return [Request(action, "*", {})]


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
                    if _like(pattern, key):
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
