"""`make cost`: what each flow of a machine's life costs at AWS list prices, measured.

Each flow runs against the local runtime (the template's functions in this process, moto behind
them) as a machine and an operator would run it: the machine as docs/join.md describes a client (its
key, CSR, proof of possession) sending the facts the `joinplane` agent sends, the operator through
the HTTP API. Every AWS call the flow causes, in every function it sets off (the HTTP functions,
the authorizer, the stream's event publisher, the audit consumer), every invocation with its
measured duration, every API request and every log byte is recorded by `joinplane_local.meter`
and priced by `joinplane_local.prices`.

A flow is run once to warm the containers and caches (its cold start is not counted: at a
million flows a cold start is rare), then `--repeat` times; the run of median cost is shown.
Durations are this machine's, on this machine's cores: Lambda's 1024 MB is about 0.6 vCPU, so
the Lambda lines are an estimate where every other line is exact.

    python -m joinplane_local.cost [--repeat N] [--flow KEY ...] [--signing-mode kms|intermediate ...]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import statistics
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import prices
from .meter import Charge, Meter
from .runtime import Runtime, start_runtime

# The `joinplane` agent's waiting (joinplane_cli.agent): the server's retryAfterSeconds, or 30 s
# when it sends none, each pause up to 25% longer so that machines deferred together spread out.
AGENT_RETRY_SECONDS = 30.0
AGENT_JITTER = 0.25

# The template's SigningMode values; each is measured on a runtime of its own and gets its key in
# the JSON line. kms: the pool CA's KMS key signs each certificate; intermediate: it signs a
# per-container intermediate, whose in-memory key signs them (docs/pki.md).
SIGNING_MODES = ("kms", "intermediate")


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


@dataclass
class Answer:
    status: int
    body: Any


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> Answer:
    """One JSON POST, its answer whatever the status."""
    request = urllib.request.Request(  # noqa: S310 (the runtime's own http:// URL)
        url, json.dumps(body).encode(), {"content-type": "application/json", **headers}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return Answer(answer.status, json.loads(answer.read() or b"null"))
    except urllib.error.HTTPError as failed:
        with failed:
            return Answer(failed.code, json.loads(failed.read() or b"null"))


class ServerClock:
    """The server's time as the machines read it: the local clock moves it forward, and a machine
    waiting for real would see its own clock move the same (its proofs must stay fresh)."""

    offset = 0.0
    _last_ms = 0

    @classmethod
    def restart(cls) -> None:
        """A new runtime's clock is the real time again: so are its machines' clocks."""
        cls.offset, cls._last_ms = 0.0, 0

    @classmethod
    def proof_ms(cls) -> int:
        cls._last_ms = max(int((time.time() + cls.offset) * 1000), cls._last_ms + 1)
        return cls._last_ms


class Machine:
    """A machine as docs/join.md describes a client: an ECDSA P-256 key, a CSR of it, a proof of
    possession on every call, and the facts the `joinplane` agent reports."""

    made = 0

    def __init__(self, url: str) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec

        Machine.made += 1
        self.url = url
        self.facts = facts(Machine.made)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.machine_token: str | None = None

    def csr(self) -> str:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import NameOID

        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.facts["hostname"])])
        request = x509.CertificateSigningRequestBuilder().subject_name(name).sign(self.key, hashes.SHA256())
        return request.public_bytes(serialization.Encoding.PEM).decode()

    def proof(self, purpose: str, credential: str, raw: bytes) -> str:
        """The `Joinplane-Proof` header for exactly these bytes (docs/join.md, "Proof of possession")."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        t = ServerClock.proof_ms()
        message = (
            f"joinplane-proof-v1\n{purpose}\n{t}\n{hashlib.sha256(credential.encode()).hexdigest()}\n"
            f"{hashlib.sha256(raw).hexdigest()}\n"
        ).encode()
        return f"t={t},sig={base64.b64encode(self.key.sign(message, ec.ECDSA(hashes.SHA256()))).decode()}"

    def _send(
        self, path: str, purpose: str, credential: str, body: dict[str, Any], headers: dict[str, str]
    ) -> Answer:
        raw = json.dumps(body).encode()
        return post(
            self.url + path, body, {**headers, "joinplane-proof": self.proof(purpose, credential, raw)}
        )

    def join(self, token: str) -> Answer:
        body = {**self.facts, "csr": self.csr()}
        answer = self._send("/machines/join", "join", token, body, {"authorization": f"Bearer {token}"})
        if answer.status == 200:
            self.machine_token = str(answer.body["machineToken"])
        return answer

    def renew(self) -> Answer:
        assert self.machine_token is not None
        token = self.machine_token
        return self._send("/machines/renew", "renew", token, {"machineToken": token, "csr": self.csr()}, {})


class Flows:
    """The flows, each in two steps: what comes before it (not measured) and the flow itself."""

    def __init__(self, runtime: Runtime) -> None:
        assert runtime.admin_key is not None and runtime.dev is not None
        ServerClock.restart()
        self.runtime = runtime
        self.url = runtime.url
        self.tenant, self.pool = runtime.dev.tenant, runtime.dev.pool
        self.open_token = self._token(requireApproval=False)
        self.approval_token = self._token(requireApproval=True)
        self.clusters = 0

    def _admin(self, path: str, body: dict[str, Any]) -> Any:
        answer = post(self.url + path, body, {"authorization": f"Bearer {self.runtime.admin_key}"})
        if answer.status != 200:
            raise SystemExit(f"make cost: {path} answered HTTP {answer.status}: {answer.body}")
        return answer.body

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

        def flow() -> int:
            # A Sylve node's request: its cluster key as a header.
            return _expect(post(self.url + "/cluster/accept-join", body, {"x-cluster-key": key}), 200)

        return flow

    def hour_of_waiting(self) -> Callable[[], int]:
        """The retries of a machine waiting an hour for approval, at the `joinplane` agent's
        cadence: the server's `retryAfterSeconds` (the agent's own 30 s when it sends none), each
        pause drawn up to JITTER longer (its mean taken)."""
        machine = self._deferred()

        def flow() -> int:
            waited, retries = 0.0, 0
            interval = AGENT_RETRY_SECONDS
            while waited + interval <= 3600:
                self._advance(interval)
                waited += interval
                response = machine.join(self.approval_token)
                retries += _expect(response, 202)
                asked = response.body.get("retryAfterSeconds") or AGENT_RETRY_SECONDS
                interval = float(asked) * (1 + AGENT_JITTER / 2)
                _settle(self.runtime)  # each retry's stream records reach the publisher on their own
            return retries

        return flow

    def _advance(self, seconds: float) -> None:
        """Time passes for the server and, as for a real machine, for its clock too."""
        answer = post(self.url + "/_local/clock", {"advanceSeconds": seconds}, {})
        ServerClock.offset = float(answer.body["offsetSeconds"])


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


def summary(results: dict[str, list[Measured]]) -> dict[str, dict[str, float]]:
    """$ per million of each flow, by signing mode."""
    return {
        mode: {r.key: round(r.lines.usd * prices.MILLION, 2) for r in measured}
        for mode, measured in results.items()
    }


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
    parser.add_argument(
        "--signing-mode",
        action="append",
        choices=SIGNING_MODES,
        help="only this signing mode (the template's SigningMode); repeatable (default: both)",
    )
    options = parser.parse_args(argv)
    started = time.monotonic()
    results: dict[str, list[Measured]] = {}
    # One meter: its hook on every AWS client made stays registered for the process.
    meter = Meter()
    meter.install()
    try:
        for mode in options.signing_mode or SIGNING_MODES:
            with start_runtime(port=0, log=io.StringIO(), parameters={"SigningMode": mode}) as runtime:
                meter.attach(runtime)
                results[mode] = measure(
                    Flows(runtime), meter, options.repeat, set(options.flow) if options.flow else None
                )
    finally:
        meter.uninstall()
    for mode, measured in results.items():
        print(f"## Signing mode `{mode}`: {MODE_TITLES[mode]}\n")
        for result in measured:
            print(table(result) + "\n")
    print(
        f"Measured in {time.monotonic() - started:.0f} s; prices: local/joinplane_local/prices.py "
        "(us-east-1, on-demand). In the intermediate mode a container's first certificate of the "
        "hour also pays for its intermediate (one KMS Sign and one transaction): each flow's "
        "unmeasured warm-up run pays it, as a busy container spreads it over all it signs in that hour."
    )
    print(json.dumps(summary(results), separators=(",", ":")))
    return 0


MODE_TITLES = {
    "kms": "the pool CA's KMS key signs each certificate",
    "intermediate": "a per-container intermediate, signed by KMS once an hour, signs in memory",
}


if __name__ == "__main__":
    sys.exit(main())
