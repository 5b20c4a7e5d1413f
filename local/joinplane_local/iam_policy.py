"""IAM's policy language, as far as the functions' statements in template.yaml use it: the
statements of a function, and the one decision IAM makes for each request (`decide`).

Action (wildcards), Resource, explicit Deny before Allow; condition operators String(Not)Equals,
String(Not)Like, with `ForAllValues:`/`ForAnyValue:` and `...IfExists`; a missing key makes
ForAllValues true and a plain operator false, as in IAM. A form outside these is an error rather
than a guess, since a statement read wrongly would check nothing.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .template import Template


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


# --- the decision ---------------------------------------------------------------------------------


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


def like(pattern: str, value: str) -> bool:
    """IAM's StringLike: `*` any run of characters (`/` and `#` too), `?` one character."""
    return pattern == value or (("*" in pattern or "?" in pattern) and _matcher(pattern)(value) is not None)


def _matches_action(pattern: str, action: str) -> bool:
    """Actions are case-insensitive; both sides are lower-cased where they are made."""
    return like(pattern, action)


_BASE = {
    "StringEquals": lambda p, v: p == v,
    "StringLike": like,
    "StringNotEquals": lambda p, v: p == v,
    "StringNotLike": like,
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
        and any(like(r, request.resource) for r in statement.resources)
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
