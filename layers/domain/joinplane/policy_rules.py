"""A pool's join policy as an operator writes it: an ordered list of rules, each a CEL condition
(`when`) and the decision it takes. Only the shape is checked here, with pydantic; whether each
condition is CEL is `joinplane.policy.compile_policy`'s question.

Kept apart from `joinplane.policy` so that the pool models (which every join imports) can name the
rule type without loading the CEL engine: a join to a pool without a policy loads neither.
"""

from __future__ import annotations

from typing import Annotated, Literal, Protocol

from pydantic import AfterValidator, BaseModel, Field

from joinplane.wire import STRICT, TEXT

# Bounds an operator would not reach by hand and that keep a policy's evaluation cheap and its
# stored size far under DynamoDB's 400 KB item: 32 rules of 2,048 characters at most.
MAX_RULES = 32
MAX_EXPRESSION = 2048
MAX_REASON = 512
RULE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# A condition may span lines (tabs and line breaks); no other control character.
EXPRESSION = r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]*$"
DECISIONS = ("approve", "defer", "deny")

Decision = Literal["approve", "defer", "deny"]


class PolicyRuleLike(Protocol):
    """A rule as the engine reads it: the request model, and the record a pool stores."""

    @property
    def name(self) -> str: ...
    @property
    def when(self) -> str: ...
    @property
    def decision(self) -> str: ...
    @property
    def reason(self) -> str: ...


class PolicyRule(BaseModel):
    """One rule: when `when` (CEL, evaluating to a bool) holds, `decision` is taken, for `reason`."""

    model_config = STRICT
    name: str = Field(pattern=RULE_NAME)
    when: str = Field(min_length=1, max_length=MAX_EXPRESSION, pattern=EXPRESSION)
    decision: Decision
    reason: str = Field(default="", max_length=MAX_REASON, pattern=TEXT)


def _distinct_names(rules: list[PolicyRule]) -> list[PolicyRule]:
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        if rule.name in seen:
            # A rule is named in the request, the audit trail and the events: two of one name
            # would make that record ambiguous.
            raise ValueError(f"rule {index} repeats the name {rule.name!r}: each rule's name is its own")
        seen.add(rule.name)
    return rules


# The type of `joinPolicy` in the pool models: at most MAX_RULES rules, their names distinct.
JoinPolicy = Annotated[list[PolicyRule], Field(max_length=MAX_RULES), AfterValidator(_distinct_names)]
