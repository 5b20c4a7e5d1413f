"""The local runtime's EventBridge input transformer, row by row against the examples of
EventBridge's own documentation (docs.aws.amazon.com/eventbridge/latest/userguide/
eb-transform-target-input.html and the InputTransformer API reference)."""

from __future__ import annotations

import json

import pytest

from joinplane_local.webhook import extract, transform

# The documentation's example event.
EVENT = {
    "version": "0",
    "id": "7bf73129-1428-4cd3-a780-95db273d1602",
    "detail-type": "EC2 Instance State-change Notification",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "2015-11-11T21:29:54Z",
    "region": "us-east-1",
    "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],
    "detail": {"instance-id": "i-0123456789", "state": "RUNNING"},
}
PATHS = {"timestamp": "$.time", "instance": "$.detail.instance-id", "state": "$.detail.state"}
RULE = {"rule_name": "example", "rule_arn": "arn:aws:events:us-east-2:123456789012:rule/example"}


def run(template: str, paths: dict[str, str] = PATHS, event: dict[str, object] = EVENT) -> str:
    return transform({"InputPathsMap": paths, "InputTemplate": template}, event, **RULE)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        # a string template: every placeholder is the value's text
        ('"instance <instance> is in <state>"', '"instance i-0123456789 is in RUNNING"'),
        ('"instance \\"<instance>\\" is in <state>"', '"instance \\"i-0123456789\\" is in RUNNING"'),
        ("<instance> is in state <state>", "i-0123456789 is in state RUNNING"),
        ('"<aws.events.rule-name> triggered"', '"example triggered"'),
    ],
    ids=["simple string", "escaped quotes", "API reference's plain text", "reserved variable in a string"],
)
def test_a_string_template_takes_each_value_as_text(template: str, expected: str) -> None:
    assert run(template) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ('{"instance" : <instance>, "state": <state>}', {"instance": "i-0123456789", "state": "RUNNING"}),
        (
            '{"instance" : <instance>, "state": "<state>", '
            '"instanceStatus": "instance \\"<instance>\\" is in <state>"}',
            {
                "instance": "i-0123456789",
                "state": "RUNNING",
                "instanceStatus": 'instance "i-0123456789" is in RUNNING',
            },
        ),
        (
            '{"instance" : <instance>, "state": [ 9, <state>, true ], "Transformed" : "Yes"}',
            {"instance": "i-0123456789", "state": [9, "RUNNING", True], "Transformed": "Yes"},
        ),
        (
            '{"ruleArn" : <aws.events.rule-arn>, "ruleName" : <aws.events.rule-name>, '
            '"original": <aws.events.event.json>}',
            {"ruleArn": RULE["rule_arn"], "ruleName": "example", "original": EVENT},
        ),
    ],
    ids=["simple JSON", "strings and variables", "variables and static values", "reserved variables"],
)
def test_a_json_template_quotes_a_value_position_and_not_a_string_position(
    template: str, expected: dict[str, object]
) -> None:
    out = run(template)
    assert json.loads(out) == expected
    assert out == json.dumps(expected, separators=(",", ":"))  # minified, as passed to the target


def test_a_path_the_event_lacks_creates_no_variable_and_its_placeholder_is_left_out() -> None:
    out = run('{"a": "[<missing>]", "b": <state>}', {**PATHS, "missing": "$.detail.nothing"})
    assert json.loads(out) == {"a": "[]", "b": "RUNNING"}


def test_a_value_inside_a_string_is_not_escaped_as_eventbridge_does_not_escape_it() -> None:
    # Given a value with a quote in it, placed inside a JSON string
    event = {**EVENT, "detail": {"state": 'say "hi"'}}
    # Then the result is the template with the raw text: not JSON any more, and sent as it is
    assert run('{"s": "<state>"}', event=event) == '{"s": "say "hi""}'


def test_undeclared_angle_brackets_are_text() -> None:
    assert json.loads(run('{"s": "a <b> c <state>"}')) == {"s": "a <b> c RUNNING"}


@pytest.mark.parametrize(
    ("path", "found"),
    [
        ("$.detail.instance-id", (True, "i-0123456789")),
        ("$.resources[0]", (True, EVENT["resources"][0])),  # type: ignore[index]
        ("$.resources[1]", (False, None)),
        ("$.detail.state.deeper", (False, None)),
        ("$", (True, EVENT)),
    ],
)
def test_json_paths_in_dot_notation(path: str, found: tuple[bool, object]) -> None:
    assert extract(EVENT, path) == found


def test_a_json_path_the_emulation_cannot_read_is_an_error() -> None:
    with pytest.raises(ValueError, match="dot notation"):
        extract(EVENT, "$..state")
