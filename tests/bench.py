"""`make bench`: cold-start cost of every function, against boto3's own.

Each sample is a fresh interpreter (-I -S -B: no site-packages, no bytecode written, as on Lambda's
read-only file system) with only the built function, the built layer and the
boto3-only runtime on its path, as on Lambda. Two figures per function, each the median of
SAMPLES processes:
- import: the function module's cold import, the figure the budget is set on (clients are created
  on first use, so this holds no client);
- first call ready: import plus creating the DynamoDB client, what a function pays before its first
  request can touch the table. Reported too, so nothing is hidden by creating clients lazily.
Baseline, measured in the same run the same way: `import boto3; boto3.client("dynamodb")`.
The budget is a ratio (import / baseline <= 1.3), never an absolute time: machines differ.
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
SAMPLES = 9
BUDGET = 1.3

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
    import app
    t1 = time.perf_counter()
    from joinplane import aws
    aws.client("dynamodb")
    t2 = time.perf_counter()
print(f"{(t1 - t0) * 1000:.2f} {(t2 - t0) * 1000:.2f}")
"""

ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "x",
    "AWS_SECRET_ACCESS_KEY": "x",
    "TABLE_NAME": "bench",
    "EVENT_BUS_NAME": "bench",
    "POWERTOOLS_SERVICE_NAME": "joinplane",
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
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in ["baseline", *names]}
    # Interleave the samples so a noisy moment on a shared machine hits every row alike.
    for _ in range(SAMPLES):
        runs["baseline"].append(sample("", "baseline"))
        for name in names:
            runs[name].append(sample(str(BUILD / name), "function"))
    baseline = statistics.median(cold for _, cold in runs["baseline"])
    print(f"Cold start, median of {SAMPLES} fresh processes (Python {sys.version.split()[0]}):\n")
    print("| function | cold import, ms (ratio) | import + DynamoDB client, ms (ratio) |")
    print("|---|---:|---:|")
    print(f'| baseline: `import boto3; boto3.client("dynamodb")` | {baseline:.0f} (1.00x) | |')
    over = []
    for name in names:
        imported = statistics.median(i for i, _ in runs[name])
        cold = statistics.median(c for _, c in runs[name])
        if imported / baseline > BUDGET:
            over.append(name)
        print(
            f"| {name} | {imported:.0f} ({imported / baseline:.2f}x) | {cold:.0f} ({cold / baseline:.2f}x) |"
        )
    print(
        f"\nBudget: every function ≤ {BUDGET}x baseline. "
        + (f"OVER: {', '.join(over)}" if over else "All within.")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
