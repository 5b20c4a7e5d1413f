"""Nothing dropped silently, checked on template.yaml: every asynchronous delivery (an EventBridge
rule's target, a schedule, Lambda's own async retries) ends, when it fails, in an SQS queue of the
stack that an alarm watches; the table's stream is retried until it is published."""

from __future__ import annotations

import re
from typing import Any

from joinplane_local.template import referenced_logical_id
from tests.support.template import (
    ALARM_TOPIC,
    PARAMETERS,
    RESOURCES,
    TEMPLATE,
    alarms_on,
    dimensions,
    of_type,
    queue_behind,
)

FUNCTIONS = of_type("AWS::Serverless::Function")
# Event sources Lambda is invoked asynchronously by: a failure there has no caller to answer.
ASYNC_SOURCES = {
    "EventBridgeRule",
    "Schedule",
    "ScheduleV2",
    "SNS",
    "S3",
    "CloudWatchEvent",
    "CloudWatchLogs",
}


def _async_events(function: dict[str, Any]) -> dict[str, Any]:
    events = function["Properties"].get("Events", {})
    return {name: event for name, event in events.items() if event["Type"] in ASYNC_SOURCES}


def test_every_async_consumer_keeps_what_it_could_not_deliver() -> None:
    consumers = {name: f for name, f in FUNCTIONS.items() if _async_events(f)}
    # Given the functions invoked asynchronously (the audit consumer and the retention job at least)
    assert {"AuditConsumerFunction", "RetentionFunction"} <= set(consumers)
    for name, function in consumers.items():
        props = function["Properties"]
        # Then a failed invocation, after Lambda's retries, goes to a queue of the stack
        failure = props.get("DeadLetterQueue", {}).get("TargetArn") or (
            props.get("EventInvokeConfig", {})
            .get("DestinationConfig", {})
            .get("OnFailure", {})
            .get("Destination")
        )
        assert failure is not None, f"{name}: no DeadLetterQueue or OnFailure destination"
        queue_behind(failure)
        # And an event EventBridge could not hand to the function goes to one too
        for event_name, event in _async_events(function).items():
            dead_letter = event["Properties"].get("DeadLetterConfig")
            assert dead_letter and "Arn" in dead_letter, f"{name}.{event_name}: no DeadLetterConfig"
            queue_behind(dead_letter["Arn"])


def test_every_rule_target_has_a_dead_letter_queue_eventbridge_may_write() -> None:
    rules = of_type("AWS::Events::Rule")
    # Given the rules the template declares itself (the webhook's)
    assert "PendingRequestWebhookRule" in rules
    for name, rule in rules.items():
        for target in rule["Properties"]["Targets"]:
            # Then each target dead-letters into a queue of the stack
            queue = queue_behind(target["DeadLetterConfig"]["Arn"])
            # And that queue's policy lets EventBridge send from this rule only
            policies = [
                p
                for p in of_type("AWS::SQS::QueuePolicy").values()
                if {"Ref": queue} in p["Properties"]["Queues"]
            ]
            assert len(policies) == 1, f"{queue}: one queue policy expected"
            (statement,) = policies[0]["Properties"]["PolicyDocument"]["Statement"]
            assert statement["Principal"] == {"Service": "events.amazonaws.com"}
            assert statement["Action"] == "sqs:SendMessage"
            assert referenced_logical_id(statement["Condition"]["ArnEquals"]["aws:SourceArn"], "Arn") == name


def test_the_generated_rules_dead_letter_queues_accept_only_their_rule() -> None:
    # SAM names the rule of a function's event <function><event>; the queue policies name it so.
    for name, function in FUNCTIONS.items():
        for event_name, event in _async_events(function).items():
            queue = queue_behind(event["Properties"]["DeadLetterConfig"]["Arn"])
            sources = [
                referenced_logical_id(s["Condition"]["ArnEquals"]["aws:SourceArn"], "Arn")
                for p in of_type("AWS::SQS::QueuePolicy").values()
                if {"Ref": queue} in p["Properties"]["Queues"]
                for s in p["Properties"]["PolicyDocument"]["Statement"]
            ]
            assert f"{name}{event_name}" in sources, f"{queue} must let {name}{event_name} send"


def test_every_dead_letter_queue_is_encrypted_kept_14_days_and_alarmed() -> None:
    queues = of_type("AWS::SQS::Queue")
    assert {"AuditDeadLetterQueue", "RetentionDeadLetterQueue", "WebhookDeadLetterQueue"} <= set(queues)
    depth_alarms = alarms_on("ApproximateNumberOfMessagesVisible")
    for name, queue in queues.items():
        props = queue["Properties"]
        assert props["SqsManagedSseEnabled"] is True, name
        assert props["MessageRetentionPeriod"] == 14 * 24 * 3600, name
        # An alarm fires on the first message waiting, and exists whenever the queue does
        watching = [
            alarm
            for alarm in depth_alarms.values()
            if dimensions(alarm["Properties"])["QueueName"] == {"Fn::GetAtt": [name, "QueueName"]}
        ]
        assert len(watching) == 1, f"{name}: one depth alarm expected"
        (alarm,) = watching
        assert alarm.get("Condition") == queue.get("Condition"), name
        assert alarm["Properties"]["Threshold"] == 0
        assert alarm["Properties"]["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["Properties"]["AlarmActions"] == [ALARM_TOPIC]


def test_the_stream_publisher_never_gives_a_record_up() -> None:
    # A bounded retry on the stream would drop a security event once exhausted.
    (stream,) = RESOURCES["EventPublisherFunction"]["Properties"]["Events"].values()
    assert stream["Type"] == "DynamoDB"
    assert stream["Properties"]["MaximumRetryAttempts"] == -1
    assert stream["Properties"]["MaximumRecordAgeInSeconds"] == -1
    assert stream["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_the_webhook_exists_only_with_a_url() -> None:
    # Given the webhook's resources, named as the local runtime reads them
    webhook = [
        "WebhookConnection",
        "WebhookDestination",
        "WebhookRole",
        "WebhookDeadLetterQueue",
        "WebhookDeadLetterQueuePolicy",
        "PendingRequestWebhookRule",
        "WebhookDeadLetterAlarm",
    ]
    # Then each exists only when a URL is given
    for name in webhook:
        assert RESOURCES[name].get("Condition") == "HasWebhook", name
    assert TEMPLATE["Conditions"]["HasWebhook"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "WebhookUrl"}, ""]}]}
    assert PARAMETERS["WebhookUrl"]["Default"] == ""
    # And the header's secret is never echoed back by CloudFormation
    assert PARAMETERS["WebhookAuthHeaderValue"]["NoEcho"] is True


def test_the_webhook_message_reads_only_mapped_fields_and_its_role_calls_only_the_webhook() -> None:
    (target,) = RESOURCES["PendingRequestWebhookRule"]["Properties"]["Targets"]
    transformer = target["InputTransformer"]
    # An unmapped <placeholder> would be sent as is: EventBridge does not complain
    assert set(re.findall(r"<(\w+)>", transformer["InputTemplate"])) == set(transformer["InputPathsMap"])
    (policy,) = RESOURCES["WebhookRole"]["Properties"]["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == "events:InvokeApiDestination"
    assert statement["Resource"] == target["Arn"] == {"Fn::GetAtt": ["WebhookDestination", "Arn"]}
