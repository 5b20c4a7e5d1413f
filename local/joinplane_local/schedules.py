"""The template's `Schedule`/`ScheduleV2` events, due on the `joinplane.clock`, so moving the local
clock forward makes them run, as time passing would. `rate(...)` is kept; a cron expression runs
every minute."""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass
from typing import Any, TextIO

from joinplane import clock

from .functions import FunctionError, Functions, report_failure
from .template import Template
from .worker_loop import Loop

SCHEDULE_CHECK_SECONDS = 0.5

_RATE = re.compile(r"rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)\Z")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


def schedule_period(expression: str) -> float | None:
    """Seconds between runs of a schedule expression; None when it cannot be emulated."""
    found = _RATE.match(expression.strip())
    if found:
        return int(found.group(1)) * _UNIT_SECONDS[found.group(2).rstrip("s")]
    if expression.strip().startswith("cron("):
        # Cron fields are not interpreted: every minute is often enough to exercise any job
        # locally, and a job must tolerate running more often than its schedule anyway.
        return 60.0
    return None


@dataclass
class Schedule:
    function: str
    event_name: str
    expression: str
    period: float | None
    enabled: bool
    input: Any
    rule_arn: str
    next_due: float = math.inf


class Scheduler(Loop):
    """Every Schedule/ScheduleV2 event of the template, due on the joinplane clock."""

    name = "schedules"
    interval = SCHEDULE_CHECK_SECONDS

    def __init__(self, functions: Functions, template: Template, log: TextIO) -> None:
        super().__init__(log)
        self.functions = functions
        self.region = template.names.region
        self.account = template.names.account
        self.schedules: list[Schedule] = []
        names = template.names
        for function, spec in functions.specs.items():
            for event_name, event in spec.events.items():
                kind = event.get("Type")
                if kind not in ("Schedule", "ScheduleV2"):
                    continue
                props = template.resolve(event.get("Properties") or {})
                expression = str(props.get("Schedule") or props.get("ScheduleExpression") or "")
                enabled = (
                    bool(props.get("Enabled", True))
                    and str(props.get("State", "ENABLED")).upper() == "ENABLED"
                )
                rule = props.get("Name") or f"{names.stack}-{function}-{event_name}"
                service, kind_path = (
                    ("scheduler", "schedule/default") if kind == "ScheduleV2" else ("events", "rule")
                )
                period = schedule_period(expression)
                if period is None:
                    print(
                        f"[joinplane-local] {function}.{event_name}: schedule {expression!r} is not emulated "
                        "(run it with POST /_local/schedules/{function}/run)",
                        file=log,
                    )
                self.schedules.append(
                    Schedule(
                        function=function,
                        event_name=event_name,
                        expression=expression,
                        period=period,
                        enabled=enabled,
                        input=props.get("Input"),
                        rule_arn=f"arn:aws:{service}:{names.region}:{names.account}:{kind_path}/{rule}",
                    )
                )

    def start(self) -> None:
        now = clock.epoch()
        # Like a new rule, the first run comes one period after the schedule is created.
        for schedule in self.schedules:
            if schedule.enabled and schedule.period is not None:
                schedule.next_due = now + schedule.period
        super().start()

    def is_quiet_since(self, instant: float) -> bool:
        return True

    def describe(self, schedule: Schedule) -> str:
        return f"{schedule.expression} → {schedule.function}"

    def event(self, schedule: Schedule) -> Any:
        if schedule.input is not None:
            return json.loads(schedule.input) if isinstance(schedule.input, str) else schedule.input
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": self.account,
            "time": clock.rfc3339(clock.epoch()),
            "region": self.region,
            "resources": [schedule.rule_arn],
            "detail": {},
        }

    def find(self, function: str, event_name: str | None = None) -> Schedule | None:
        for schedule in self.schedules:
            if schedule.function == function and event_name in (None, schedule.event_name):
                return schedule
        return None

    def run(self, schedule: Schedule) -> Any:
        self.completed += 1
        return self.functions.invoke(schedule.function, self.event(schedule))

    def cycle(self) -> None:
        now = clock.epoch()
        for schedule in self.schedules:
            if schedule.enabled and schedule.period is not None and schedule.next_due > now + schedule.period:
                # The clock went back (`/_local/clock` reset): due one period from now, not from
                # where the clock had been.
                schedule.next_due = now + schedule.period
            if schedule.period is None or not schedule.enabled or now < schedule.next_due:
                continue
            # Runs missed while the clock jumped forward collapse into one, so moving the clock
            # a day ahead does not fire a five-minute job 288 times.
            missed = math.floor((now - schedule.next_due) / schedule.period) + 1
            schedule.next_due += missed * schedule.period
            try:
                self.run(schedule)
            except FunctionError as error:
                report_failure(schedule.function, error, self.log)
