"""template.yaml as the operability tests read it: resources by type, the metrics an alarm watches,
and a !Sub body with its ${...} filled in."""

from __future__ import annotations

import re
from typing import Any

from joinplane_local.template import load, referenced_logical_id

TEMPLATE: dict[str, Any] = load()
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
PARAMETERS: dict[str, Any] = TEMPLATE["Parameters"]
ALARM_TOPIC = {"Ref": "AlarmTopic"}

_SUB = re.compile(r"\$\{([^}!]+)\}")


def of_type(resource_type: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in RESOURCES.items() if r["Type"] == resource_type}


def watched(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics an alarm reads (`Namespace`, `MetricName`, `Dimensions`), whether it watches one
    metric or computes over several."""
    props = alarm["Properties"]
    if "MetricName" in props:
        return [{k: props[k] for k in ("Namespace", "MetricName", "Dimensions")}]
    return [query["MetricStat"]["Metric"] for query in props.get("Metrics", []) if "MetricStat" in query]


def alarms_on(metric_name: str) -> dict[str, dict[str, Any]]:
    """Every alarm that reads `metric_name`."""
    return {
        name: alarm
        for name, alarm in of_type("AWS::CloudWatch::Alarm").items()
        if any(metric["MetricName"] == metric_name for metric in watched(alarm))
    }


def dimensions(metric: dict[str, Any]) -> dict[str, Any]:
    return {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}


def sub_references(text: str) -> set[str]:
    """The names a !Sub string refers to: `${X}` and `${X.Attribute}` give X."""
    return {
        token.split(".", 1)[0] if not token.startswith("AWS::") else token for token in _SUB.findall(text)
    }


def substituted(text: str, value: str = "x") -> str:
    """A !Sub string with every ${...} replaced by `value`, as CloudFormation would fill it in."""
    return _SUB.sub(value, text)


def queue_behind(arn: Any) -> str:
    """The logical id of the stack's SQS queue an `Arn` value names (`!GetAtt Queue.Arn`)."""
    logical_id = referenced_logical_id(arn, "Arn")
    assert logical_id is not None and RESOURCES[logical_id]["Type"] == "AWS::SQS::Queue", arn
    return logical_id
