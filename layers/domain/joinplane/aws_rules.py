"""The AWS IAM join method's rules (docs/aws.md), as pure functions: which AWS callers a join token
admits, and what a caller's ARN says about the machine (an EC2 instance profile's session is named
after the instance).

A token's `attestation.aws` holds an account list and ARN patterns. Every list the token gives must
match (an empty one does not constrain), so `{"accounts": ["123456789012"], "arns":
["arn:aws:sts::123456789012:assumed-role/gpu-node-*/*"]}` admits only the gpu-node roles of that
account: read as "either", the account alone would admit every role of it and the pattern would
be decoration. In a pattern `*` stands for any run of characters (`/` included) and nothing else
is special; the match is on the whole ARN, case-sensitive, as STS spells it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from joinplane.dal.tokens import AwsRulesRecord

ACCOUNT = re.compile(r"[0-9]{12}")
# What GetCallerIdentity answers: an IAM user, an assumed role's session, the account's root, a
# federated user, in any partition (aws, aws-cn, aws-us-gov).
ARN = re.compile(r"arn:aws(?:-[a-z]+)*:(?:sts|iam)::([0-9]{12}):[\x21-\x7e]{1,1000}")
# EC2 names an instance profile's role session after the instance: i- and 8 or 17 hex digits.
_INSTANCE_ID = re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})")


class Caller(NamedTuple):
    """Who signed the request, as STS answered: the account, the ARN and the user id."""

    account: str
    arn: str
    user_id: str

    @property
    def instance_id(self) -> str:
        """The EC2 instance whose profile signed, when the session name is an instance id."""
        return instance_id(self.arn)


def session_name(arn: str) -> str:
    """An assumed role's session name (`arn:...:assumed-role/<role>/<session>`); "" otherwise."""
    resource = arn.split(":", 5)[-1]
    kind, _, rest = resource.partition("/")
    if kind != "assumed-role" or "/" not in rest:
        return ""
    return rest.rsplit("/", 1)[1]


def instance_id(arn: str) -> str:
    name = session_name(arn)
    return name if _INSTANCE_ID.fullmatch(name) else ""


def arn_matches(pattern: str, arn: str) -> bool:
    """`*` matches any run of characters, everything else itself, over the whole ARN. Linear in
    the lengths (one backtrack point, the last `*`): a regex of `.*`s backtracks exponentially on
    a pattern of many stars against a long ARN a caller chose (an IAM user's path)."""
    p = a = 0
    star, resume = -1, 0
    while a < len(arn):
        if p < len(pattern) and pattern[p] == "*":
            star, resume = p, a
            p += 1
        elif p < len(pattern) and pattern[p] == arn[a]:
            p += 1
            a += 1
        elif star >= 0:
            p, resume = star + 1, resume + 1
            a = resume
        else:
            return False
    return all(c == "*" for c in pattern[p:])


def admits(rules: AwsRulesRecord, caller: Caller) -> bool:
    """Does the token's rules admit this caller? Every list given must match."""
    if not rules.accounts and not rules.arns:
        return False  # a token is never stored so; an empty rule must not mean "anyone"
    if rules.accounts and caller.account not in rules.accounts:
        return False
    return not rules.arns or any(arn_matches(pattern, caller.arn) for pattern in rules.arns)
