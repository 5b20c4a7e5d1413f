"""`make bench`, fleet boot: 10,000 machines start `joinplane agent` within the same minute
(and within 10 s).

A simulation, not a load test (the emulator is one process on two cores; AWS's limits are what
decide): each machine joins with the agent's own retry policy, taken from the CLI's code
(`api.Retry` for the quick retries, then `agent.Backoff`, never sooner than Retry-After), against
a model of the deployed stack's limits, each a number docs/fleet.md sources:

- API Gateway's bucket for `POST /machines/join` (`JoinRateLimit`/`JoinBurstLimit`): past it, a
  429 without Retry-After, before any function runs;
- Lambda's concurrency (1,000 an account by default): past it, API Gateway's own 500;
- the joins the stack can sign and record a second: KMS's ECC Sign quota (300 a second, an
  account and Region) or, lower, what the one token item every join updates commits; past it,
  503 with `Retry-After: 1`, after botocore's own 3 attempts held the function about 1.5 s.

For each scenario: when the last machine is admitted, the median and 99th percentile of the
wait, the requests the fleet sent, and the answers it was refused with. Seeded: the same numbers
every run. Run: `python -m tests.bench_fleet_boot`.
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections import Counter
from dataclasses import dataclass, field

from joinplane_cli import agent, api

MACHINES = 10_000
JOIN_SECONDS = 0.3  # a join's invocation when nothing throttles it
THROTTLED_SECONDS = 1.5  # an invocation whose KMS Sign botocore retried 3 times, then gave up
LAMBDA_CONCURRENCY = 1_000
KMS_ECC_PER_SECOND = 300


@dataclass(frozen=True)
class Scenario:
    name: str
    route_rate: float  # JoinRateLimit
    route_burst: float  # JoinBurstLimit
    admits_per_second: int  # min(KMS, the token item), whichever binds
    boot_window: float = 60.0  # seconds over which the fleet powers on, uniformly


SCENARIOS = (
    Scenario("the template's defaults (JoinRateLimit 20, burst 40)", 20, 40, KMS_ECC_PER_SECOND),
    Scenario("JoinRateLimit 1000, burst 2000", 1000, 2000, KMS_ECC_PER_SECOND),
    Scenario("JoinRateLimit 1000, burst 2000, all within 10 s", 1000, 2000, KMS_ECC_PER_SECOND, 10.0),
    Scenario("JoinRateLimit 1000, burst 2000, one token committing only 100 joins/s", 1000, 2000, 100),
)


@dataclass
class Machine:
    booted: float
    attempt: int = 0  # within the client's quick retries
    backoff: agent.Backoff = field(default_factory=agent.Backoff)
    admitted: float = 0.0


@dataclass
class Stack:
    scenario: Scenario
    tokens: float = 0.0
    refilled: float = 0.0
    busy_until: list[float] = field(default_factory=list)  # a heap of running invocations' ends
    second: int = -1
    admitted_this_second: int = 0

    def __post_init__(self) -> None:
        self.tokens = self.scenario.route_burst

    def answer(self, now: float) -> tuple[int, float]:
        """The status a join sent at `now` gets, and when its answer arrives."""
        rate, burst = self.scenario.route_rate, self.scenario.route_burst
        self.tokens = min(burst, self.tokens + (now - self.refilled) * rate)
        self.refilled = now
        if self.tokens < 1:
            return 429, now
        self.tokens -= 1
        while self.busy_until and self.busy_until[0] <= now:
            heapq.heappop(self.busy_until)
        if len(self.busy_until) >= LAMBDA_CONCURRENCY:
            return 500, now
        if int(now) != self.second:
            self.second, self.admitted_this_second = int(now), 0
        if self.admitted_this_second < self.scenario.admits_per_second:
            self.admitted_this_second += 1
            heapq.heappush(self.busy_until, now + JOIN_SECONDS)
            return 200, now + JOIN_SECONDS
        heapq.heappush(self.busy_until, now + THROTTLED_SECONDS)
        return 503, now + THROTTLED_SECONDS


def refusal(status: int) -> api.ApiError:
    """The error the CLI reads from each refusal (api.parse_error's codes)."""
    if status == 503:
        failed = api.ApiError(503, "UNAVAILABLE", "the key store (KMS) is busy or unavailable, retry later")
        failed.retry_after = 1.0
        return failed
    if status == 429:
        return api.ApiError(429, "RESOURCE_EXHAUSTED", "Too Many Requests")
    return api.ApiError(500, "HTTP_500", "Internal Server Error")


def simulate(scenario: Scenario, seed: int = 1) -> dict[str, float]:
    random.seed(seed)
    stack = Stack(scenario)
    retry = api.Retry(attempts=agent.QUICK_RETRIES)
    machines = [Machine(random.uniform(0, scenario.boot_window)) for _ in range(MACHINES)]
    pending = [(m.booted, i) for i, m in enumerate(machines)]
    heapq.heapify(pending)
    answers: Counter[int] = Counter()
    per_second: Counter[int] = Counter()
    while pending:
        now, i = heapq.heappop(pending)
        machine = machines[i]
        per_second[int(now)] += 1
        status, answered = stack.answer(now)
        answers[status] += 1
        if status == 200:
            machine.admitted = answered
            continue
        failed = refusal(status)
        pause = retry.pause(failed, machine.attempt)
        if pause is None:  # the quick retries are spent: the agent waits it out and starts over
            pause, machine.attempt = machine.backoff.next(failed.retry_after or 0.0), 0
        else:
            machine.attempt += 1
        heapq.heappush(pending, (answered + pause, i))
    waits = [m.admitted - m.booted for m in machines]
    return {
        "done": max(m.admitted for m in machines),
        "p50": statistics.median(waits),
        "p99": statistics.quantiles(waits, n=100)[98],
        "requests": sum(answers.values()),
        "peak": max(per_second.values()),
        **{f"status_{s}": n for s, n in answers.items()},
    }


def main() -> int:
    print(f"Fleet boot: {MACHINES:,} machines power on together, each running `joinplane agent`:\n")
    print(
        "| scenario | all admitted after | wait p50 | wait p99 | requests sent | peak requests/s "
        "| 429 | 500 | 503 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario in SCENARIOS:
        r = simulate(scenario)
        print(
            f"| {scenario.name} | {r['done']:.0f} s | {r['p50']:.0f} s | {r['p99']:.0f} s "
            f"| {r['requests']:,.0f} | {r['peak']:,.0f} | {r.get('status_429', 0):,.0f} "
            f"| {r.get('status_500', 0):,.0f} | {r.get('status_503', 0):,.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
