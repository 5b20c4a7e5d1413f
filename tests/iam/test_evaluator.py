"""joinplane_local's emulated IAM (iam_policy, iam_requests) decides as IAM does: the tests of the
functions' policies are only as good as this evaluator, so each rule it relies on is pinned here,
table-driven, without moto."""

from __future__ import annotations

from typing import Any

import pytest

from joinplane_local import iam, iam_policy, iam_requests
from joinplane_local.template import Names

NAMES = Names(stack="joinplane-local", physical={"Table": "jp-t"})
TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/jp-t"


def statement(
    actions: list[str], resources: list[str], conditions: dict[str, Any] | None = None, effect: str = "Allow"
) -> iam_policy.Statement:
    return iam_policy.Statement(
        function="F",
        index=0,
        effect=effect,
        actions=tuple(actions),
        resources=tuple(resources),
        conditions=tuple(
            iam_policy.Condition(op, key, tuple(v if isinstance(v, list) else [v]))
            for op, block in (conditions or {}).items()
            for key, v in block.items()
        ),
        source={},
    )


LEADING = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["MACHINE#*", "JREQ#*"]}}


@pytest.mark.parametrize(
    ("context", "allowed"),
    [
        ({"dynamodb:LeadingKeys": ("MACHINE#m1",)}, True),
        ({"dynamodb:LeadingKeys": ("MACHINE#m1", "JREQ#r1")}, True),  # BatchGetItem: every key
        ({"dynamodb:LeadingKeys": ("MACHINE#m1", "APIKEY#k1")}, False),
        ({"dynamodb:LeadingKeys": ("APIKEY#k1",)}, False),
        # `MACHINES#...` is another kind of item: the `#` right after the prefix counts
        ({"dynamodb:LeadingKeys": ("MACHINES#acme#p1",)}, False),
        # IAM's ForAllValues holds over no values at all (why only keyed actions are ever granted)
        ({}, True),
    ],
)
def test_leading_keys_allow_only_the_named_prefixes(context: dict[str, Any], allowed: bool) -> None:
    # Given a statement naming two kinds of item
    granted = statement(["dynamodb:PutItem"], [TABLE], LEADING)
    # When a put with these partition keys is decided / Then only the named kinds pass
    assert (
        iam_policy.decide([granted], iam_policy.Request("dynamodb:PutItem", TABLE, context)) is not None
    ) is allowed


@pytest.mark.parametrize(
    ("operator", "context", "holds"),
    [
        ("StringEquals", {}, False),  # a missing key fails a plain operator
        ("StringEqualsIfExists", {}, True),
        ("StringNotEquals", {}, True),
        ("StringEquals", {"k": "a"}, True),
        ("StringEquals", {"k": "A"}, False),  # values are case-sensitive
        ("StringLike", {"k": "abc"}, True),
        ("StringNotLike", {"k": "abc"}, False),
        ("ForAnyValue:StringEquals", {"k": ("x", "a")}, True),
        ("ForAllValues:StringEquals", {"k": ("x", "a")}, False),
        ("ForAnyValue:StringEquals", {}, False),
    ],
)
def test_condition_operators(operator: str, context: dict[str, Any], holds: bool) -> None:
    values = ("a*",) if "Like" in operator else ("a",)
    assert iam_policy._holds(iam_policy.Condition(operator, "k", values), context) is holds


def test_a_plain_operator_on_several_values_is_refused_as_a_template_error() -> None:
    with pytest.raises(ValueError, match="ForAllValues"):
        iam_policy._holds(
            iam_policy.Condition("StringLike", "dynamodb:LeadingKeys", ("A#*",)),
            {"dynamodb:LeadingKeys": ("A#1", "B#2")},
        )


def test_a_deny_wins_and_actions_match_case_insensitively_with_wildcards() -> None:
    allow = statement(["dynamodb:*"], [TABLE])
    deny = statement(["DynamoDB:DeleteItem"], ["*"], effect="Deny")
    assert iam_policy.decide([allow, deny], iam_policy.Request("dynamodb:GetItem", TABLE, {})) is allow
    assert iam_policy.decide([allow, deny], iam_policy.Request("dynamodb:DeleteItem", TABLE, {})) is None


def test_the_table_arn_does_not_cover_its_indexes() -> None:
    granted = statement(["dynamodb:Query"], [TABLE])
    assert (
        iam_policy.decide([granted], iam_policy.Request("dynamodb:Query", TABLE + "/index/gsi1", {})) is None
    )
    assert iam_policy.decide([granted], iam_policy.Request("dynamodb:Query", TABLE, {})) is granted


def test_a_transaction_is_authorized_action_by_action_with_each_items_key() -> None:
    # Given a transaction of a conditional update and a put, as dal.dynamo writes them
    params = {
        "TransactItems": [
            {
                "Update": {
                    "TableName": "jp-t",
                    "Key": {"pk": {"S": "JOINTOKEN#t1"}, "sk": {"S": "JOINTOKEN"}},
                    "UpdateExpression": "SET usesRemaining = usesRemaining - :one",
                    "ConditionExpression": "#state = :active AND expiresAtEpoch > :now",
                    "ExpressionAttributeNames": {"#state": "state"},
                }
            },
            {"Put": {"TableName": "jp-t", "Item": {"pk": {"S": "MACHINE#m1"}, "sk": {"S": "MACHINE"}}}},
            {
                "ConditionCheck": {
                    "TableName": "jp-t",
                    "Key": {"pk": {"S": "TENANT#acme"}, "sk": {"S": "POOL#p"}},
                }
            },
        ]
    }
    # When IAM reads it
    update, put, check = iam_requests.dynamodb_requests("TransactWriteItems", params, NAMES)
    # Then each action is its own authorization, with its own partition key and attributes
    assert (update.action, update.leading_keys) == ("dynamodb:UpdateItem", ("JOINTOKEN#t1",))
    assert update.context["dynamodb:Attributes"] == ("expiresAtEpoch", "state", "usesRemaining")
    assert update.context["dynamodb:EnclosingOperation"] == "TransactWriteItems"
    assert (put.action, put.leading_keys, put.context["dynamodb:Attributes"]) == (
        "dynamodb:PutItem",
        ("MACHINE#m1",),
        ("pk", "sk"),
    )
    assert (check.action, check.resource) == ("dynamodb:ConditionCheckItem", TABLE)


def test_a_query_of_an_index_is_on_the_index_and_keyed_by_the_index_partition() -> None:
    params = {
        "TableName": "jp-t",
        "IndexName": "gsi1",
        "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
        "ExpressionAttributeNames": {"#pk": "gsi1pk", "#sk": "gsi1sk"},
        "ExpressionAttributeValues": {":pk": {"S": "TENANT#acme#APIKEYS"}, ":prefix": {"S": "x"}},
    }
    (query,) = iam_requests.dynamodb_requests("Query", params, NAMES)
    assert (query.resource, query.leading_keys) == (TABLE + "/index/gsi1", ("TENANT#acme#APIKEYS",))


@pytest.mark.parametrize(
    ("expression", "names", "attributes"),
    [
        ("SET a = :a, #b = if_not_exists(#b, :zero) REMOVE c", {"#b": "b"}, {"a", "b", "c"}),
        (
            "#s = :x AND attribute_not_exists(pk) OR size(labels) > :n",
            {"#s": "state"},
            {"state", "pk", "labels"},
        ),
        ("SET facts.cpu = :c, hosts[0] = :h", None, {"facts", "hosts"}),
        ("ADD uses :one DELETE tags :t", None, {"uses", "tags"}),
    ],
)
def test_the_attributes_an_expression_names_are_its_top_level_names(
    expression: str, names: dict[str, str] | None, attributes: set[str]
) -> None:
    assert iam_requests.expression_attributes(expression, names) == attributes


def test_a_refusal_says_which_statement_would_grant_it() -> None:
    request = iam_policy.Request("dynamodb:PutItem", TABLE, {"dynamodb:LeadingKeys": ("CHALLENGE#c1",)})
    hint = iam.grant_hint("MachineJoinFunction", request)
    assert "MachineJoinFunction's Policies in template.yaml" in hint
    assert "Action: dynamodb:PutItem" in hint and "Resource: !GetAtt Table.Arn" in hint
    assert "dynamodb:LeadingKeys: ['CHALLENGE#*']" in hint
