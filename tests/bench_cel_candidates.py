"""How the CEL implementation was chosen (docs/policy.md): each candidate installed from PyPI in a
fresh virtualenv, then, in a fresh process each, import + first evaluation timed (median of 5),
and the conformance sample of `cel_cases` run. Not part of `make test` (it installs packages):

    .venv/bin/python -m tests.bench_cel_candidates [workdir]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

CANDIDATES = {
    "cel-expr-python==0.1.3": "from cel_expr_python import cel as E\n"
    "def ev(expr, v):\n"
    "    r = E.NewEnv(variables={k: E.Type.DYN for k in v}).compile(expr).eval(data=v)\n"
    "    if r.type() == E.Type.ERROR: raise RuntimeError(r.value())\n"
    "    return r.value()\n",
    "common-expression-language==0.10.0": "import cel\ndef ev(expr, v): return cel.evaluate(expr, v)\n",
    "cel-python==0.5.0": "import celpy\nenv = celpy.Environment()\n"
    "def ev(expr, v):\n"
    "    r = env.program(env.compile(expr)).evaluate({k: celpy.json_to_cel(x) for k, x in v.items()})\n"
    "    if isinstance(r, Exception): raise r\n"
    "    return r\n",
    "python-cel==0.1.1": "import cel\ndef ev(expr, v): return cel.evaluate_expression(expr, v)\n",
}

PROBE = """
import time, json, sys
t0 = time.perf_counter()
{driver}
request = {{"hostname": "gpu-1", "gpuCount": 8}}
ev("request.hostname.startsWith('gpu-') && request.gpuCount > 4", {{"request": request}})
cold = (time.perf_counter() - t0) * 1000
if sys.argv[1] == "cold":
    print(json.dumps(cold)); sys.exit()
sys.path.insert(0, {cases!r})
from cel_cases import CASES, ERROR
passed = 0
for expr, v, want in CASES:
    try:
        got = ev(expr, v)
        passed += want != ERROR and got == want and type(got == want) is bool
    except BaseException:
        passed += want == ERROR
print(json.dumps(passed))
"""


def main(workdir: Path) -> None:
    cases = str(Path(__file__).parent / "support")
    for requirement, driver in CANDIDATES.items():
        env = workdir / requirement.split("==")[0]
        if not env.exists():
            venv.create(env, with_pip=True)
            subprocess.run([env / "bin" / "pip", "install", "-q", requirement], check=True)
        script = PROBE.format(driver=driver, cases=cases)
        python = str(env / "bin" / "python")

        def run(mode: str, python: str = python, script: str = script) -> float:
            out = subprocess.run([python, "-c", script, mode], capture_output=True, text=True, check=True)
            return float(json.loads(out.stdout.strip().splitlines()[-1]))

        colds = [run("cold") for _ in range(5)]
        cold = statistics.median(colds)
        print(f"{requirement}: {int(run('cases'))} cases passed, cold {cold:.1f} ms (median of 5)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="cel-candidates-")))
