"""`make cost`: what each flow of a machine's life costs at AWS list prices, measured.

Each flow runs against the local runtime (the template's functions in this process, moto behind
them) as a machine and an operator would run it: the machine through the `joinplane` agent's own
client code (its key, CSR, proof of possession, the facts the agent sends), the operator through
the HTTP API. Every AWS call the flow causes, in every function it sets off (the HTTP functions,
the authorizer, the stream's event publisher, the audit consumer), every invocation with its
measured duration, every API request and every log byte is recorded by `joinplane_local.meter`
and priced by `joinplane_local.prices`.

A flow is run once to warm the containers and caches (its cold start is not counted: at a
million flows a cold start is rare), then `--repeat` times; the run of median cost is shown.
Durations are this machine's, on this machine's cores: Lambda's 1024 MB is about 0.6 vCPU, so
the Lambda lines are an estimate where every other line is exact.

    python -m joinplane_local.cost [--repeat N] [--json-only]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import prices
from .meter import Charge, Meter
from .runtime import Runtime, start_runtime

# The signing modes the template offers; each gets its key in the JSON line. Only KMS per
# certificate exists today.
SIGNING_MODES = ("kms",)


def facts(n: int) -> dict[str, Any]:
    """Machine `n` as the agent reports a GPU node (joinplane_cli.facts.Facts.request_fields): 8
    GPUs and their UUIDs, a serial number, a system UUID, two MACs; its own values, since
    hardware another active machine holds is deferred as a cloned image."""
    return {
        "machineFingerprint": f"{n:064x}",
        "hostname": f"gpu-node-{n:04d}",
        "os": "linux",
        "arch": "amd64",
        "cpuCount": 96,
        "memoryMb": 1_031_891,
        "gpu": ["NVIDIA H100 80GB HBM3"] * 8,
        "gpuCount": 8,
        "gpuIds": [f"GPU-{uuid.UUID(int=n * 16 + g)}" for g in range(8)],
        "hardware": {
            "serialNumber": f"SN-{n:08X}",
            "systemUuid": str(uuid.UUID(int=n)),
            "macAddresses": [
                f"3c:ec:ef:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}",
                f"3c:ec:ee:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}",
            ],
        },
    }


@dataclass
class Lines:
    """One flow's charges, merged by line."""

    charges: list[Charge]

    def merged(self) -> list[Charge]:
        by_line: dict[tuple[str, str], Charge] = {}
        for c in self.charges:
            key = (c.service, c.line)
            if key not in by_line:
                by_line[key] = Charge(c.service, c.line, 0, 0.0, c.unit, 0.0, {})
            merged = by_line[key]
            merged.calls += c.calls
            merged.units += c.units
            merged.usd += c.usd
            if merged.unit != c.unit:
                merged.unit = "WRU+RRU"
            for name, units in c.detail.items():
                merged.detail[name] = merged.detail.get(name, 0.0) + units
        return sorted(by_line.values(), key=lambda c: -c.usd)

    @property
    def usd(self) -> float:
        return sum(c.usd for c in self.charges)


class Machine:
    """A machine as the agent is one: its key, and the agent's client towards the API."""

    made = 0

    def __init__(self, url: str) -> None:
        from joinplane_cli.api import Client
        from joinplane_cli.keys import MachineKey

        Machine.made += 1
        self.facts = facts(Machine.made)
        self.key = MachineKey.generate()
        self.client = Client(url)
        self.machine_token: str | None = None

    def join(self, token: str) -> Any:
        body = {**self.facts, "csr": self.key.csr(self.facts["hostname"])}
        response = self.client.post(
            "/machines/join",
            body,
            bearer=token,
            proof=lambda raw: self.key.proof("join", token, raw),
        )
        if response.status == 200:
            self.machine_token = str(response.body["machineToken"])
        return response

    def renew(self) -> Any:
        assert self.machine_token is not None
        token = self.machine_token
        return self.client.post(
            "/machines/renew",
            {"machineToken": token, "csr": self.key.csr(self.facts["hostname"])},
            proof=lambda raw: self.key.proof("renew", token, raw),
        )


class Flows:
    """The flows, each in two steps: what comes before it (not measured) and the flow itself."""

    def __init__(self, runtime: Runtime) -> None:
        from joinplane_cli.api import Client

        assert runtime.admin_key is not None and runtime.dev is not None
        self.runtime = runtime
        self.url = runtime.url
        self.operator = Client(runtime.url, api_key=runtime.admin_key)
        self.tenant, self.pool = runtime.dev.tenant, runtime.dev.pool
        self.open_token = self._token(requireApproval=False)
        self.approval_token = self._token(requireApproval=True)
        self.clusters = 0

    def _admin(self, path: str, body: dict[str, Any]) -> Any:
        return self.operator.post(path, body, bearer=self.runtime.admin_key).body

    def _token(self, **options: Any) -> str:
        body = {"tenantId": self.tenant, "poolId": self.pool, "maxUses": 10_000, **options}
        return str(self._admin("/api/compute/joinTokens/create", body)["token"])

    def _cluster(self) -> str:
        self.clusters += 1
        pool = f"cost-cluster-{self.clusters}"
        self._admin(
            "/api/compute/pools/create",
            {
                "tenantId": self.tenant,
                "poolId": pool,
                "siteId": "dev-site",
                "name": "Cluster",
                "workspaceId": "ws",
                "cluster": {},
            },
        )
        rotated = self._admin("/api/compute/clusters/rotateKey", {"tenantId": self.tenant, "poolId": pool})
        return str(rotated["clusterKey"])

    def _approve(self, request_id: str) -> None:
        self._admin(
            "/api/compute/joinRequests/approve",
            {"tenantId": self.tenant, "poolId": self.pool, "requestId": request_id},
        )

    def _deferred(self) -> Machine:
        machine = Machine(self.url)
        assert machine.join(self.approval_token).status == 202
        return machine

    def _admitted(self) -> Machine:
        machine = Machine(self.url)
        assert machine.join(self.open_token).status == 200
        return machine

    # Each returns the flow to measure, prepared.

    def admit(self) -> Callable[[], int]:
        machine = Machine(self.url)
        return lambda: _expect(machine.join(self.open_token), 200)

    def defer_approve_consume(self) -> Callable[[], int]:
        machine = Machine(self.url)

        def flow() -> int:
            # Three moments apart (the operator decides later, the machine asks again later): each
            # one's stream records reach the publisher on their own.
            deferred = machine.join(self.approval_token)
            _expect(deferred, 202)
            _settle(self.runtime)
            self._approve(str(deferred.body["joinRequest"]["requestId"]))
            _settle(self.runtime)
            return _expect(machine.join(self.approval_token), 200)

        return flow

    def pending_retry(self) -> Callable[[], int]:
        machine = self._deferred()
        return lambda: _expect(machine.join(self.approval_token), 202)

    def renew(self) -> Callable[[], int]:
        machine = self._admitted()
        return lambda: _expect(machine.renew(), 200)

    def rejoin(self) -> Callable[[], int]:
        machine = self._admitted()
        # A re-join comes long after the admission (a reinstall), when the fleet's other joins
        # meanwhile have kept the container's pool and CA fresh.
        self._advance(3600)
        self._admitted()
        return lambda: _expect(machine.join(self.open_token), 200)

    def cluster_join(self) -> Callable[[], int]:
        from joinplane.clusters import inventory

        key = self._cluster()
        node, first = "node-1", 1
        items = [
            {
                "nodeId": node,
                "guestType": "vm",
                "guestId": first + i,
                "recordId": first + i,
                "name": f"vm-{first + i}",
            }
            for i in range(5)
        ]
        built = inventory.build_report(items)
        body = {
            "nodeId": node,
            "nodeIp": "10.0.0.1",
            "nodeVersion": "1.0.0",
            "preflight": False,
            "inventory": {
                "entries": [e.model_dump() for e in built.entries],
                "conflicts": [],
                "digest": built.digest,
            },
        }
        raw = json.dumps(body).encode()
        headers = {"content-type": "application/json", "x-cluster-key": key}

        def flow() -> int:
            # A Sylve node's request (it sends its cluster key as a header, which the agent's
            # client does not).
            request = urllib.request.Request(  # noqa: S310 (the runtime's own http:// URL)
                self.url + "/cluster/accept-join", raw, headers, method="POST"
            )
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                if answer.status != 200:
                    raise SystemExit(f"make cost: accept-join answered HTTP {answer.status}")
            return 1

        return flow

    def hour_of_waiting(self) -> Callable[[], int]:
        """The retries of a machine waiting an hour for approval, at the agent's cadence: the
        server's `retryAfterSeconds`, each pause drawn up to JITTER longer (its mean taken)."""
        from joinplane_cli import agent, skew

        machine = self._deferred()

        def flow() -> int:
            waited, retries = 0.0, 0
            interval = agent.retry_after(None)
            while waited + interval <= 3600:
                self._advance(interval)
                waited += interval
                response = machine.join(self.approval_token)
                retries += _expect(response, 202)
                interval = agent.retry_after(response.body.get("retryAfterSeconds")) * (1 + agent.JITTER / 2)
                _settle(self.runtime)  # each retry's stream records reach the publisher on their own
            skew.forget()
            return retries

        return flow

    def _advance(self, seconds: float) -> None:
        """Time passes for the server and, as for a real machine, for the agent's clock too."""
        from joinplane_cli import skew

        sent = time.time()
        answer = self._admin_local({"advanceSeconds": seconds})
        skew.learn(sent + float(answer["offsetSeconds"]), sent, sent, err=io.StringIO())

    def _admin_local(self, body: dict[str, Any]) -> Any:
        from joinplane_cli.api import Client

        return Client(self.url).post("/_local/clock", body).body


def _settle(runtime: Runtime) -> None:
    """Wait until the stream and the bus have delivered everything the flow set off: what is
    still under way when a flow's meter closes would be counted in the next one, or nowhere."""
    # Twice: a record the stream shows a moment after the workers first looked quiet (seen once
    # in a few dozen runs: a flow's event counted nowhere) is waited for by the second pass.
    for _ in range(2):
        if not runtime.drain(timeout=30):
            raise SystemExit("make cost: the stream and rule workers did not settle within 30 s")


def _expect(response: Any, status: int) -> int:
    if response.status != status:
        raise SystemExit(f"make cost: expected HTTP {status}, got {response.status}: {response.body}")
    return 1


FLOWS: list[tuple[str, str, str]] = [
    # (JSON key, title, Flows method)
    ("admit", "join admitted at once", "admit"),
    ("deferApproveConsume", "deferred, approved, consumed", "defer_approve_consume"),
    ("pendingRetry", "one pending retry", "pending_retry"),
    ("renew", "renewal (same key)", "renew"),
    ("rejoin", "re-join (same key, new CSR)", "rejoin"),
    ("clusterJoin", "cluster accept-join, a cluster's first node, 5 guests", "cluster_join"),
    ("hourOfWaiting", "an hour of waiting for approval (agent's retries)", "hour_of_waiting"),
]


@dataclass
class Measured:
    key: str
    title: str
    lines: Lines
    count: int  # what the flow reports: 1, or the retries of an hour


def measure(
    flows: Flows, meter: Meter, repeat: int, only: set[str] | None = None, *, warm_up: bool = True
) -> list[Measured]:
    """Each flow (or those in `only`) `repeat` times, after one unmeasured run when `warm_up`; the
    run of median cost is kept."""
    runtime = flows.runtime
    measured = []
    for key, title, method in FLOWS:
        if only is not None and key not in only:
            continue
        runs: list[tuple[Lines, int]] = []
        times = 1 if key == "hourOfWaiting" else repeat
        for attempt in range(-1 if warm_up and key != "hourOfWaiting" else 0, times):
            flow = getattr(flows, method)()
            _settle(runtime)
            with meter.flow() as charges:
                count = flow()
                _settle(runtime)
            if attempt >= 0:
                runs.append((Lines(list(charges)), count))
        median = statistics.median_low([lines.usd for lines, _ in runs])
        lines, count = next(run for run in runs if run[0].usd == median)
        measured.append(Measured(key, title, lines, count))
    return measured


def measure_once(flows: Flows, meter: Meter, keys: list[str]) -> dict[str, Lines]:
    """Each of these flows once, all prepared first (one wait for what the preparations set off,
    and they warm the join function): the quick form the tests pin the calls of."""
    method = {key: name for key, _, name in FLOWS}
    prepared = [(key, getattr(flows, method[key])()) for key in keys]
    _settle(flows.runtime)
    measured = {}
    for key, flow in prepared:
        with meter.flow() as charges:
            flow()
            _settle(flows.runtime)
        measured[key] = Lines(list(charges))
    return measured


def _units(charge: Charge) -> str:
    if charge.unit == "bytes":
        return f"{charge.units:,.0f} B"
    if charge.unit == "GB-s":
        return f"{charge.units:.4f} GB-s"
    return f"{charge.units:g} {charge.unit}"


def table(result: Measured) -> str:
    per_million = result.lines.usd * prices.MILLION
    # Lambda's duration is this machine's (waiting on the emulator, on shared cores); every other
    # line is exact, so the sum without it is what a change can be compared on from run to run.
    exact = sum(c.usd for c in result.lines.charges if c.service != "Lambda")
    invocations = sum(c.calls for c in result.lines.charges if c.service == "Lambda")
    exact += invocations * prices.LAMBDA_REQUEST
    rows = [
        f"### {result.title} (`{result.key}`): ${per_million:,.2f} per million"
        + (f" ({result.count} retries)" if result.count != 1 else ""),
        "",
        f"${exact * prices.MILLION:,.2f} of it exact: everything but the measured Lambda durations.",
        "",
        "| service | line | calls | units | $ per million | where the units go |",
        "|---|---|--:|--:|--:|---|",
    ]
    for charge in result.lines.merged():
        detail = ", ".join(
            f"{name} {units:g}" for name, units in sorted(charge.detail.items(), key=lambda d: -d[1])
        )
        rows.append(
            f"| {charge.service} | {charge.line} | {charge.calls} | {_units(charge)} | "
            f"{charge.usd * prices.MILLION:,.2f} | {detail} |"
        )
    return "\n".join(rows)


def summary(results: list[Measured]) -> dict[str, dict[str, float]]:
    figures = {r.key: round(r.lines.usd * prices.MILLION, 2) for r in results}
    return dict.fromkeys(SIGNING_MODES, figures)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m joinplane_local.cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--repeat", type=_positive, default=3, help="measured runs of each flow (default 3)")
    parser.add_argument(
        "--flow", action="append", choices=[key for key, _, _ in FLOWS], help="only this flow; repeatable"
    )
    options = parser.parse_args(argv)
    started = time.monotonic()
    meter = Meter()
    meter.install()
    try:
        with start_runtime(port=0, log=io.StringIO()) as runtime:
            meter.attach(runtime)
            results = measure(
                Flows(runtime), meter, options.repeat, set(options.flow) if options.flow else None
            )
    finally:
        meter.uninstall()
    for result in results:
        print(table(result) + "\n")
    print(
        f"Measured in {time.monotonic() - started:.0f} s; prices: local/joinplane_local/prices.py "
        "(us-east-1, on-demand). One signing mode, `kms` (KMS signs each certificate): the "
        "intermediate mode does not exist yet, so the JSON has no key for it."
    )
    print(json.dumps(summary(results), separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
