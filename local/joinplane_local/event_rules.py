"""The template's EventBridge rules, each a real rule on the emulated bus targeting an SQS queue
that this module drains, so the pattern matching is EventBridge's (moto's) own:

- `EventBridgeRule` events of a function (`RuleConsumer`): the queue stands in for Lambda's
  asynchronous invocation queue. A failed invocation is retried when the message becomes visible
  again, up to the function's async retry limit (`EventInvokeConfig.MaximumRetryAttempts`, 2).
- `AWS::Events::Rule` resources whose target is an `AWS::Events::ApiDestination` (the operators'
  webhook, present when its `Condition` holds; `ApiDestinationConsumer`): applies the target's
  input transformer, makes the request, retries per the target's `RetryPolicy` (event age counted
  from when the queue received it) and sends what fails to its dead-letter queue with
  EventBridge's message attributes (see `webhook.py`).

Not emulated: the retry policies and dead-letter queues of `EventBridgeRule` function events.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any, TextIO

from .functions import FunctionError, Functions, report_failure
from .template import Template
from .webhook import ApiDestinationTarget, Outcome, body_for, deliver
from .worker_loop import ClientFactory, Loop, backoff

QUEUE_WAIT_SECONDS = 1
# Stands in for the delay between Lambda's async retries (about 1 and 2 minutes on AWS).
QUEUE_VISIBILITY_SECONDS = 2
DEFAULT_ASYNC_RETRIES = 2


def envelope(event: dict[str, Any], account: str) -> dict[str, Any]:
    """EventBridge's event envelope, in its order; moto leaves `account` out."""
    return {
        "version": event.get("version", "0"),
        "id": event.get("id"),
        "detail-type": event.get("detail-type"),
        "source": event.get("source"),
        "account": event.get("account", account),
        "time": event.get("time"),
        "region": event.get("region"),
        "resources": event.get("resources", []),
        "detail": event.get("detail", {}),
    }


def _resource_name(*parts: str, limit: int) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", "-".join(p for p in parts if p))
    return name[:limit]


class RuleConsumer(Loop):
    """One `Type: EventBridgeRule` event: rule → SQS queue → the function."""

    interval = 0.0  # the long poll is the wait

    def __init__(
        self,
        functions: Functions,
        function: str,
        event_name: str,
        properties: dict[str, Any],
        template: Template,
        clients: ClientFactory,
        log: TextIO,
        suffix: str = "",
    ) -> None:
        super().__init__(log)
        self.function = function
        self.name = f"{function}.{event_name}"
        self.functions = functions
        self.account = template.names.account
        props = template.resolve(properties)
        self.bus = str(props.get("EventBusName", "default"))
        self.pattern = props.get("Pattern") or {}
        self.enabled = str(props.get("State", "ENABLED")).upper() == "ENABLED"
        self.input = props.get("Input")
        self.input_path = props.get("InputPath")
        self.input_transformer = props.get("InputTransformer")
        base = f"{template.names.stack}-{function}-{event_name}"
        self.rule_name = _resource_name(base, suffix, limit=64)
        self.queue_name = _resource_name(base, suffix, limit=80)
        invoke_config = functions.spec(function).properties.get("EventInvokeConfig") or {}
        self.max_attempts = 1 + int(
            template.resolve(invoke_config.get("MaximumRetryAttempts", DEFAULT_ASYNC_RETRIES))
        )
        self.events = clients("events")
        self.sqs = clients("sqs")
        self.queue_url: str | None = None
        self.in_flight = 0

    def describe(self) -> str:
        return f"EventBridge bus {self.bus} {json.dumps(self.pattern)} → {self.function}"

    def setup(self) -> None:
        self.queue_url = self.sqs.create_queue(
            QueueName=self.queue_name, Attributes={"VisibilityTimeout": str(QUEUE_VISIBILITY_SECONDS)}
        )["QueueUrl"]
        queue_arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.events.put_rule(
            Name=self.rule_name,
            EventBusName=self.bus,
            EventPattern=json.dumps(self.pattern),
            State="ENABLED" if self.enabled else "DISABLED",
        )
        target: dict[str, Any] = {"Id": "joinplane-local", "Arn": queue_arn}
        if self.input_transformer:
            target["InputTransformer"] = self.input_transformer
        self.events.put_targets(Rule=self.rule_name, EventBusName=self.bus, Targets=[target])

    def teardown(self) -> None:
        try:
            self.events.remove_targets(Rule=self.rule_name, EventBusName=self.bus, Ids=["joinplane-local"])
            self.events.delete_rule(Name=self.rule_name, EventBusName=self.bus)
            if self.queue_url:
                self.sqs.delete_queue(QueueUrl=self.queue_url)
        except Exception as error:  # the emulator may already be gone; nothing is left to leak then
            print(f"[joinplane-local] {self.name}: cleanup: {error}", file=self.log, flush=True)

    def is_quiet_since(self, instant: float) -> bool:
        if self.queue_url is None:
            return True  # not set up (yet): nothing can be waiting on it
        if self.in_flight:
            return False
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return not self.in_flight and all(v == "0" for v in attributes.values())

    def cycle(self) -> None:
        if self.queue_url is None:
            self.setup()
        answer = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=QUEUE_WAIT_SECONDS,
            AttributeNames=["ApproximateReceiveCount"],
        )
        for message in answer.get("Messages", []):
            if self._stop.is_set():
                return  # unacknowledged: it is delivered again, as after a crash
            self.in_flight += 1
            try:
                self._handle(message)
            finally:
                self.completed += 1
                self.in_flight -= 1

    def on_error(self) -> None:
        self.queue_url = None  # set the rule and queue up again (the emulator may have been reset)

    def _event(self, body: str) -> Any:
        event = json.loads(body)
        if self.input is not None:
            return json.loads(self.input) if isinstance(self.input, str) else self.input
        if self.input_transformer or not isinstance(event, dict):
            return event
        shaped = envelope(event, self.account)
        if self.input_path:
            value: Any = shaped
            for part in str(self.input_path).removeprefix("$").strip(".").split("."):
                if part:
                    value = value.get(part) if isinstance(value, dict) else None
            return value
        return shaped

    def _handle(self, message: dict[str, Any]) -> None:
        assert self.queue_url is not None
        attempt = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            self.functions.invoke(self.function, self._event(message["Body"]))
        except FunctionError as error:
            report_failure(self.function, error, self.log)
            if attempt < self.max_attempts:
                return  # it comes back after the visibility timeout: the async retry
            print(
                f"[joinplane-local] {self.name}: event dropped after {attempt} attempts "
                "(Lambda's asynchronous retry limit)",
                file=self.log,
                flush=True,
            )
        except ValueError as error:
            print(f"[joinplane-local] {self.name}: undeliverable message: {error}", file=self.log, flush=True)
        self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])


# --- EventBridge API destinations (the webhook) ---------------------------------------------

# A message stays invisible while it is retried here; it leaves the queue when delivered or
# dead-lettered (SQS's maximum: 12 hours).
HELD_VISIBILITY_SECONDS = 43200


@dataclass
class _Held:
    receipt: str
    event: dict[str, Any]
    received: float
    attempts: int = 0
    next_at: float = 0.0


class ApiDestinationConsumer(Loop):
    """One rule target that is an API destination: rule → SQS queue → HTTP request, with the
    target's input transformer, RetryPolicy and dead-letter queue (see `webhook.py`).

    The retries are EventBridge's exponential backoff, scaled down from minutes to
    `backoff`'s fractions of a second so a local run shows them happen."""

    interval = 0.0  # the long poll, or the wait for the next retry, is the wait

    def __init__(
        self,
        target: ApiDestinationTarget,
        template: Template,
        clients: ClientFactory,
        log: TextIO,
        suffix: str = "",
    ) -> None:
        super().__init__(log)
        self.target = target
        self.name = f"{target.rule}.{target.target_id}"
        names = template.names
        self.account = names.account
        base = f"{names.stack}-{target.rule}"
        self.rule_name = _resource_name(base, suffix, limit=64)
        self.queue_name = _resource_name(base, target.target_id, suffix, limit=80)
        bus_path = "" if target.bus == "default" else f"{target.bus}/"
        self.rule_arn = f"arn:aws:events:{names.region}:{names.account}:rule/{bus_path}{self.rule_name}"
        self.target_arn = f"arn:aws:events:{names.region}:{names.account}:api-destination/{target.rule}"
        self.events = clients("events")
        self.sqs = clients("sqs")
        self.queue_url: str | None = None
        self.dead_letter_url: str | None = None
        self.held: list[_Held] = []
        self.delivered = 0
        self.dead_letters: list[dict[str, Any]] = []  # what went to the DLQ, as sent
        self.in_flight = 0
        self._last_request = -math.inf

    def describe(self) -> str:
        return self.target.describe()

    def setup(self) -> None:
        self.queue_url = self.sqs.create_queue(
            QueueName=self.queue_name, Attributes={"VisibilityTimeout": str(HELD_VISIBILITY_SECONDS)}
        )["QueueUrl"]
        queue_arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        if self.target.dead_letter_queue:
            # The template's own queue name: it outlives the run's rule, as the deployed one does.
            self.dead_letter_url = self.sqs.create_queue(QueueName=self.target.dead_letter_queue)["QueueUrl"]
        self.events.put_rule(
            Name=self.rule_name,
            EventBusName=self.target.bus,
            EventPattern=json.dumps(self.target.pattern),
            State="ENABLED" if self.target.enabled else "DISABLED",
        )
        # The queue gets the event as it is: the transformer is applied here, by EventBridge's rules.
        self.events.put_targets(
            Rule=self.rule_name,
            EventBusName=self.target.bus,
            Targets=[{"Id": "joinplane-local", "Arn": queue_arn}],
        )

    def teardown(self) -> None:
        try:
            self.events.remove_targets(
                Rule=self.rule_name, EventBusName=self.target.bus, Ids=["joinplane-local"]
            )
            self.events.delete_rule(Name=self.rule_name, EventBusName=self.target.bus)
            if self.queue_url:
                self.sqs.delete_queue(QueueUrl=self.queue_url)
        except Exception as error:  # the emulator may already be gone; nothing is left to leak then
            print(f"[joinplane-local] {self.name}: cleanup: {error}", file=self.log, flush=True)

    def is_quiet_since(self, instant: float) -> bool:
        if self.queue_url is None:
            return True
        if self.held or self.in_flight:
            return False
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return not self.held and not self.in_flight and all(v == "0" for v in attributes.values())

    def on_error(self) -> None:
        self.queue_url = None  # set up again; what was held comes back when its queue does
        self.held = []

    def cycle(self) -> None:
        if self.queue_url is None:
            self.setup()
        answer = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0 if self.held else QUEUE_WAIT_SECONDS,
        )
        for message in answer.get("Messages", []):
            try:
                event = envelope(json.loads(message["Body"]), self.account)
            except (ValueError, AttributeError) as error:
                print(
                    f"[joinplane-local] {self.name}: undeliverable message: {error}",
                    file=self.log,
                    flush=True,
                )
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                continue
            self.held.append(_Held(message["ReceiptHandle"], event, received=time.monotonic()))
        for held in list(self.held):
            if self._stop.is_set():
                return  # still held: the queue gives it back after the visibility timeout
            if held.next_at <= time.monotonic():
                self._attempt(held)
        if self.held:
            wait = min(h.next_at for h in self.held) - time.monotonic()
            self._stop.wait(min(max(wait, 0.0), 0.5))

    def _attempt(self, held: _Held) -> None:
        self.in_flight += 1
        try:
            try:
                body = body_for(self.target, held.event, rule_name=self.rule_name, rule_arn=self.rule_arn)
            except ValueError as error:  # a JSON path the emulation cannot read: no attempt can succeed
                outcome = Outcome(False, False, "InputTransformerError", str(error))
            else:
                if self.target.rate_limit:
                    self._stop.wait(
                        max(0.0, self._last_request + 1 / self.target.rate_limit - time.monotonic())
                    )
                self._last_request = time.monotonic()
                outcome = deliver(self.target, body)
            held.attempts += 1
            if outcome.delivered:
                self.delivered += 1
                self._done(held)
                return
            retries = held.attempts - 1
            exhausted: str | None = None
            if outcome.retryable:
                delay = max(backoff(held.attempts), outcome.retry_after or 0.0)
                age = time.monotonic() - held.received
                if outcome.retry_after is not None and outcome.retry_after < 0:
                    exhausted = "RetryAfter"
                elif retries >= self.target.retry.maximum_retry_attempts:
                    exhausted = "MaximumRetryAttempts"
                elif age + delay > self.target.retry.maximum_event_age_seconds:
                    exhausted = "MaximumEventAgeInSeconds"
                else:
                    held.next_at = time.monotonic() + delay
                    print(
                        f"[joinplane-local] {self.name}: event {held.event.get('id')}: {outcome.message}; "
                        f"retry {retries + 1} of {self.target.retry.maximum_retry_attempts} in {delay:.1f} s",
                        file=self.log,
                        flush=True,
                    )
                    return
            self._dead_letter(held, outcome, exhausted, retries)
        finally:
            self.in_flight -= 1

    def _dead_letter(self, held: _Held, outcome: Outcome, exhausted: str | None, retries: int) -> None:
        attributes = {
            "RULE_ARN": self.rule_arn,
            "TARGET_ARN": self.target_arn,
            "ERROR_CODE": outcome.code,
            "ERROR_MESSAGE": outcome.message,
            "RETRY_ATTEMPTS": str(retries),
        }
        if exhausted:
            attributes["EXHAUSTED_RETRY_CONDITION"] = exhausted
        where = "dropped (the target has no dead-letter queue)"
        if self.dead_letter_url:
            self.sqs.send_message(
                QueueUrl=self.dead_letter_url,
                MessageBody=json.dumps(held.event),
                MessageAttributes={
                    k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()
                },
            )
            self.dead_letters.append({"event": held.event, "attributes": attributes})
            where = f"sent to the dead-letter queue {self.target.dead_letter_queue}"
        print(
            f"[joinplane-local] {self.name}: event {held.event.get('id')}: {outcome.message} after "
            f"{held.attempts} attempt(s); {where}",
            file=self.log,
            flush=True,
        )
        self._done(held)

    def _done(self, held: _Held) -> None:
        assert self.queue_url is not None
        self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=held.receipt)
        self.held.remove(held)
        self.completed += 1
