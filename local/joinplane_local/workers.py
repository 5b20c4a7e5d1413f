"""The template's event sources other than HTTP, run in background threads, started, stopped and
drained together: DynamoDB streams (`stream_poller`), EventBridge rules and API destinations
(`event_rules`), schedules (`schedules`). An event source of another type is named at start as not
emulated.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any, TextIO
from urllib.parse import parse_qsl

from .event_rules import ApiDestinationConsumer, RuleConsumer
from .functions import FunctionError, Functions, report_failure
from .gateway import Gateway
from .http_server import Request, Response
from .schedules import Scheduler
from .stream_poller import STREAM_POLL_SECONDS, StreamPoller
from .template import Template
from .webhook import api_destination_targets
from .worker_loop import ClientFactory, Loop


class Workers:
    """The template's stream, rule and schedule event sources for one run."""

    def __init__(
        self,
        template: Template,
        functions: Functions,
        clients: ClientFactory,
        *,
        log: TextIO | None = None,
        suffix: str = "",
        stream_poll_seconds: float = STREAM_POLL_SECONDS,
    ) -> None:
        self.log = log or sys.stderr
        self.functions = functions
        self.streams: list[StreamPoller] = []
        self.rules: list[RuleConsumer] = []
        self.destinations = [
            ApiDestinationConsumer(target, template, clients, self.log, suffix)
            for target in api_destination_targets(template)
        ]
        self.scheduler = Scheduler(functions, template, self.log)
        self.unsupported: list[str] = []
        self.running = False
        for function, spec in functions.specs.items():
            for event_name, event in spec.events.items():
                kind = event.get("Type")
                props = event.get("Properties") or {}
                if kind == "DynamoDB":
                    poller = StreamPoller(functions, function, event_name, props, template, clients, self.log)
                    poller.interval = stream_poll_seconds
                    self.streams.append(poller)
                elif kind in ("EventBridgeRule", "CloudWatchEvent"):
                    self.rules.append(
                        RuleConsumer(
                            functions, function, event_name, props, template, clients, self.log, suffix
                        )
                    )
                elif kind not in ("HttpApi", "Schedule", "ScheduleV2"):
                    self.unsupported.append(f"{function}.{event_name} ({kind})")

    def _rule_targets(self) -> list[RuleConsumer | ApiDestinationConsumer]:
        return [*self.rules, *self.destinations]

    def describe(self) -> list[str]:
        lines = [s.describe() for s in self.streams] + [r.describe() for r in self.rules]
        lines += [d.describe() for d in self.destinations]
        lines += [self.scheduler.describe(s) for s in self.scheduler.schedules]
        return lines

    def register_routes(self, gateway: Gateway) -> None:
        gateway.local_route("POST", r"/_local/schedules/(?P<function>[A-Za-z0-9]+)/run", self._run_route)

    def start(self) -> None:
        for name in self.unsupported:
            print(f"[joinplane-local] event source not emulated: {name}", file=self.log, flush=True)
        for rule in self._rule_targets():
            try:
                rule.setup()
            except Exception as error:
                # e.g. DynamoDB Local behind --endpoint-url has no EventBridge: the loop retries.
                print(
                    f"[joinplane-local] {rule.name}: {type(error).__name__}: {error}",
                    file=self.log,
                    flush=True,
                )
        for stream in self.streams:
            try:
                stream.prepare()
            except Exception as error:
                print(
                    f"[joinplane-local] {stream.name}: {type(error).__name__}: {error}",
                    file=self.log,
                    flush=True,
                )
        loops: list[Loop] = [*self.streams, *self.rules, *self.destinations, self.scheduler]
        for loop in loops:
            loop.start()
        self.running = True

    def stop(self) -> None:
        if not self.running:
            return
        loops: list[Loop] = [*self.streams, *self.rules, *self.destinations, self.scheduler]
        for loop in loops:
            loop.signal_stop()
        for loop in loops:
            loop.join()
        for rule in self._rule_targets():
            rule.teardown()
        self.running = False

    def run_schedule(self, function: str, event_name: str | None = None) -> Any:
        """Run a function's schedule now; raises KeyError if it has none."""
        schedule = self.scheduler.find(function, event_name)
        if schedule is None:
            raise KeyError(function)
        return self.scheduler.run(schedule)

    def _run_route(self, request: Request, found: re.Match[str]) -> Response:
        function = found.group("function")
        event_name = dict(parse_qsl(request.raw_query)).get("event")
        try:
            result = self.run_schedule(function, event_name)
        except KeyError:
            return Response.json(404, {"message": f"no Schedule event on function {function}"})
        except FunctionError as error:
            report_failure(function, error, self.log)
            return Response.json(500, {"errorType": error.error_type, "errorMessage": error.message})
        return Response.json(200, result)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until everything written to the streams and put on the rules' queues before this
        call has been delivered, including what those deliveries cause. False on timeout."""
        if not self.running:
            return True
        deadline = time.monotonic() + timeout
        loops: list[Loop] = [*self.streams, *self.rules, *self.destinations]
        while time.monotonic() < deadline:
            before = sum(loop.completed for loop in loops)
            started = time.monotonic()
            while not all(loop.is_quiet_since(started) for loop in loops):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)
            # Quiet everywhere and nothing delivered meanwhile: no delivery can have fed another.
            if sum(loop.completed for loop in loops) == before:
                return True
        return False
