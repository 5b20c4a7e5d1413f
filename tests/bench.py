"""`make bench`: cold-start cost of every function, against boto3's own.

Each sample is a fresh interpreter (-I -S: no site-packages; it reads the bytecode `make build`
shipped) with only the built function, the built layer and the boto3-only runtime on its path, as
on Lambda. Two figures per function, each the median of SAMPLES processes:
- import: the function module's cold import (it makes no client: clients are created on first use);
- import + first client: import plus creating the DynamoDB client, what a cold request pays before
  it can touch the table. The budget is on this column, the one a user pays.
Baseline, measured in the same run the same way: `import boto3; boto3.client("dynamodb")`.
The budget is a ratio (import + client / baseline <= 1.4), never an absolute time: machines differ.

Three probe rows, outside the budget, say where a function's time goes: the client as the
functions make it (`joinplane.aws`, botocore without boto3) with nothing else imported, and the
same after `import joinplane.observe` (powertools Logger and single_metric, which every HTTP
function and the authorizer load) or after pydantic's BaseModel (which every function validating a
request loads). Their differences to the first are what logging + metrics, and pydantic, cost.
The order matters: imported after a client, either would pay for the garbage collector's full
pass over botocore's objects, which the functions avoid (joinplane.aws freezes them).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / ".aws-sam" / "build"
LAYER = BUILD / "DomainLayer" / "python"
RUNTIME = ROOT / ".lambda-runtime"
SAMPLES = 15
BASELINE_EVERY = 4  # rows between two baseline samples
BUDGET = 1.4

PROBE = """
import sys, time
sys.path[:0] = [p for p in sys.argv[1:4] if p]
mode = sys.argv[4]
t0 = time.perf_counter()
if mode == "baseline":
    import boto3
    boto3.client("dynamodb")
    t1 = t2 = time.perf_counter()
else:
    if mode == "function":
        import app
    elif mode == "observe":
        import joinplane.observe
    elif mode == "pydantic":
        from pydantic import BaseModel
    t1 = time.perf_counter()
    from joinplane import aws
    aws.client("dynamodb")
    t2 = time.perf_counter()
print(f"{(t1 - t0) * 1000:.2f} {(t2 - t0) * 1000:.2f}")
"""

# Probe rows, outside the budget: loaded first, then the client made as the functions make it
# (joinplane.aws), so each differs from the first one by what that import costs a function.
PROBES = [
    ("`joinplane.aws` client, nothing else imported", "client"),
    ("`import joinplane.observe` (powertools Logger + Metrics), then the client", "observe"),
    ("`from pydantic import BaseModel`, then the client", "pydantic"),
]

# The template's Globals environment, as far as an import reads it.
ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "x",
    "AWS_SECRET_ACCESS_KEY": "x",
    "TABLE_NAME": "bench",
    "EVENT_BUS_NAME": "bench",
    "POWERTOOLS_SERVICE_NAME": "joinplane",
    "POWERTOOLS_METRICS_NAMESPACE": "Joinplane/bench",
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
    "AWS_LAMBDA_LOG_LEVEL": "INFO",
}


def sample(task: str, mode: str) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, task, str(LAYER), str(RUNTIME), mode],
        capture_output=True,
        text=True,
        env=ENV,
        check=True,
        timeout=120,
    ).stdout
    imported, cold = out.split()
    return float(imported), float(cold)


def functions() -> list[str]:
    return sorted(p.name for p in BUILD.iterdir() if (p / "app.py").exists())


def main() -> int:
    if not (BUILD / "template.yaml").exists():
        print("no build output: run `make build runtime` first", file=sys.stderr)
        return 2
    names = functions()
    probes = [mode for _, mode in PROBES]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in ["baseline", *probes, *names]}
    # Interleave the samples so a noisy moment on a shared machine hits every row alike, and
    # sample the baseline between every few rows: every ratio divides by it.
    rows = [("", mode) for mode in probes] + [(str(BUILD / name), "function") for name in names]
    for _ in range(SAMPLES):
        for index, (task, mode) in enumerate(rows):
            if index % BASELINE_EVERY == 0:
                runs["baseline"].append(sample("", "baseline"))
            runs[mode if mode != "function" else Path(task).name].append(sample(task, mode))
    baseline = statistics.median(cold for _, cold in runs["baseline"])

    def cold(name: str) -> float:
        return statistics.median(c for _, c in runs[name])

    print(
        f"Cold start, median of {SAMPLES} fresh processes per row, {len(runs['baseline'])} for the"
        f" baseline (Python {sys.version.split()[0]}):\n"
    )
    print("| function | cold import, ms (ratio) | import + first client, ms (ratio) |")
    print("|---|---:|---:|")
    print(f'| baseline: `import boto3; boto3.client("dynamodb")` | | {baseline:.0f} (1.00x) |')
    for label, mode in PROBES:
        imported = statistics.median(i for i, _ in runs[mode])
        print(f"| probe: {label} | {imported:.0f} | {cold(mode):.0f} ({cold(mode) / baseline:.2f}x) |")
    over = []
    for name in names:
        imported = statistics.median(i for i, _ in runs[name])
        ratio = cold(name) / baseline
        if ratio > BUDGET:
            over.append(f"{name} ({ratio:.2f}x)")
        print(f"| {name} | {imported:.0f} ({imported / baseline:.2f}x) | {cold(name):.0f} ({ratio:.2f}x) |")
    print(
        f"\nBudget: every function's import + first client ≤ {BUDGET}x baseline. "
        + (f"OVER: {', '.join(over)}" if over else "All within.")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
