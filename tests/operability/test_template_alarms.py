"""What pages an operator and what they watch, checked on template.yaml: the alarms the issue names,
each to the alarm topic with a description of what to do; a topic CloudWatch can actually publish
to; and a dashboard whose custom metrics are the ones joinplane.observe emits."""

from __future__ import annotations

import json
import re
from typing import Any

from joinplane import observe
from joinplane_local.template import ROOT
from tests.support.template import (
    ALARM_TOPIC,
    PARAMETERS,
    RESOURCES,
    TEMPLATE,
    alarms_on,
    dimensions,
    of_type,
    sub_references,
    substituted,
    watched,
)

ALARMS = of_type("AWS::CloudWatch::Alarm")
FUNCTIONS = of_type("AWS::Serverless::Function")
NAMESPACE = {"Fn::Sub": "Joinplane/${AWS::StackName}"}


def test_every_alarm_notifies_the_topic_both_ways_and_says_what_to_do() -> None:
    assert len(ALARMS) >= 2 * len(FUNCTIONS) + 7
    for name, alarm in ALARMS.items():
        props = alarm["Properties"]
        # Then it pages when it fires and again when it clears
        assert props["AlarmActions"] == [ALARM_TOPIC], name
        assert props["OKActions"] == [ALARM_TOPIC], name
        # And no traffic is not trouble: a quiet hour must not page
        assert props["TreatMissingData"] == "notBreaching", name
        # And its description points at what to do
        description = props["AlarmDescription"]
        text = description if isinstance(description, str) else description["Fn::Sub"]
        assert "docs/operating.md#" in text, name


def test_every_function_has_an_errors_and_a_throttles_alarm() -> None:
    for metric in ("Errors", "Throttles"):
        # Given the alarms on the Lambda metric
        alarmed = [
            dimensions(m)["FunctionName"]
            for alarm in alarms_on(metric).values()
            for m in watched(alarm)
            if m["Namespace"] == "AWS/Lambda"
        ]
        # Then each function has exactly one, firing on the first occurrence
        assert sorted(a["Ref"] for a in alarmed) == sorted(FUNCTIONS), metric
        for alarm in alarms_on(metric).values():
            assert alarm["Properties"]["Threshold"] == 0


def test_the_api_5xx_rate_is_alarmed_as_a_share_of_requests() -> None:
    (alarm,) = alarms_on("5xx").values()
    metrics = {m["MetricName"]: m for m in watched(alarm)}
    assert set(metrics) == {"5xx", "Count"}
    for metric in metrics.values():
        assert metric["Namespace"] == "AWS/ApiGateway"
        assert dimensions(metric) == {"ApiId": {"Ref": "HttpApi"}}
    (expression,) = [q for q in alarm["Properties"]["Metrics"] if "Expression" in q]
    assert expression["ReturnData"] is True
    assert "100 * errors / requests" in expression["Expression"]
    assert 0 < alarm["Properties"]["Threshold"] <= 10


def test_a_stuck_stream_is_alarmed() -> None:
    (alarm,) = alarms_on("IteratorAge").values()
    (metric,) = watched(alarm)
    assert dimensions(metric) == {"FunctionName": {"Ref": "EventPublisherFunction"}}
    assert alarm["Properties"]["Statistic"] == "Maximum"
    # Well inside the stream's 24 hours, so there is time to act before a record is lost
    assert alarm["Properties"]["Threshold"] <= 15 * 60 * 1000


def test_publisher_failures_are_alarmed_on_the_metrics_the_publisher_emits() -> None:
    for metric_name, outcome in (("EventsFailed", "failed"), ("RecordsSetAside", "undecodable")):
        # Given the alarm on the publisher's custom metric
        (alarm,) = alarms_on(metric_name).values()
        (metric,) = watched(alarm)
        # Then it reads the metric under the name, namespace and dimensions observe writes
        assert metric_name in observe.METRICS
        assert metric["Namespace"] == NAMESPACE
        assert dimensions(metric) == {"outcome": outcome, "service": observe.SERVICE}
        assert alarm["Properties"]["Statistic"] == "Sum"
        assert alarm["Properties"]["Threshold"] == 0


def test_the_namespace_the_alarms_read_is_the_one_the_functions_write() -> None:
    variables = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == NAMESPACE
    assert variables["POWERTOOLS_SERVICE_NAME"] == observe.SERVICE
    for function in FUNCTIONS.values():
        overridden = function["Properties"].get("Environment", {}).get("Variables", {})
        assert "POWERTOOLS_METRICS_NAMESPACE" not in overridden


def test_table_throttles_are_alarmed_on_the_table_and_its_indexes() -> None:
    alarms = {**alarms_on("ReadThrottleEvents"), **alarms_on("WriteThrottleEvents")}
    (alarm,) = alarms.values()
    tables = {dimensions(m)["TableName"]["Ref"] for m in watched(alarm)}
    assert tables == {"Table"}
    indexes = {dimensions(m).get("GlobalSecondaryIndexName") for m in watched(alarm)}
    declared = {i["IndexName"] for i in RESOURCES["Table"]["Properties"]["GlobalSecondaryIndexes"]}
    assert declared <= indexes


def test_cloudwatch_can_publish_to_the_encrypted_topic() -> None:
    topic = RESOURCES["AlarmTopic"]["Properties"]
    # alias/aws/sns would encrypt it too, but its key policy cannot admit CloudWatch: no alarm would
    # ever arrive.
    assert topic["KmsMasterKeyId"] == {"Ref": "AlarmTopicKey"}
    key = RESOURCES["AlarmTopicKey"]["Properties"]
    assert key["EnableKeyRotation"] is True
    grants = [
        s for s in key["KeyPolicy"]["Statement"] if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert grants and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(grants[0]["Action"])


def test_the_alarm_email_is_optional() -> None:
    assert PARAMETERS["AlarmEmail"]["Default"] == ""
    subscription = RESOURCES["AlarmEmailSubscription"]
    assert subscription["Condition"] == "HasAlarmEmail"
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["TopicArn"] == ALARM_TOPIC


def _dashboard() -> tuple[str, dict[str, Any]]:
    body = RESOURCES["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    return body, json.loads(substituted(body))


def test_the_dashboard_is_json_once_cloudformation_fills_it_in() -> None:
    body, dashboard = _dashboard()
    assert dashboard["widgets"]
    # Every ${...} names a parameter, a resource of the stack or a pseudo parameter (a typo would
    # fail the deployment, or worse, substitute into a string)
    for name in sub_references(body):
        assert name.startswith("AWS::") or name in RESOURCES or name in PARAMETERS, name
    # And it never refers to a resource that may not exist
    for name in sub_references(body) - {n for n in sub_references(body) if n.startswith("AWS::")}:
        assert "Condition" not in RESOURCES.get(name, {}), name


def test_the_dashboard_shows_every_metric_of_the_catalogue_and_only_those() -> None:
    _, dashboard = _dashboard()
    shown: set[str] = set()
    for widget in dashboard["widgets"]:
        for row in widget.get("properties", {}).get("metrics", []):
            values = [v for v in row if not isinstance(v, dict)]
            if values and values[0] == "Joinplane/x":
                # Given a custom metric row: namespace, name, then dimension pairs
                name, pairs = values[1], values[2:]
                shown.add(name)
                # Then it is in the catalogue, by outcome and service as observe writes it
                assert name in observe.METRICS, name
                assert dict(zip(pairs[::2], pairs[1::2], strict=True)).keys() == {"outcome", "service"}
                assert pairs[pairs.index("service") + 1] == observe.SERVICE
            for query in (v for v in row if isinstance(v, dict) and "expression" in v):
                # A SEARCH for outcomes that vary (reason codes, admin actions)
                (name,) = re.findall(r'MetricName=\\?"(\w+)\\?"', query["expression"])
                assert "{Joinplane/x,outcome,service}" in query["expression"]
                assert name in observe.METRICS, name
                shown.add(name)
    assert shown == set(observe.METRICS)


def test_every_alarm_points_at_a_section_of_the_operating_guide() -> None:
    # Given the guide's headings as GitHub anchors them
    guide = (ROOT / "docs" / "operating.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", guide, re.M)
    }
    for name, alarm in ALARMS.items():
        description = alarm["Properties"]["AlarmDescription"]
        text = description if isinstance(description, str) else description["Fn::Sub"]
        # Then the section an alarm sends the engineer to exists
        for anchor in re.findall(r"docs/operating\.md#([a-z0-9-]+)", text):
            assert anchor in anchors, f"{name}: no section #{anchor}"
