"""The OpenAPI document (shared/openapi.json) against the server itself.

schemathesis (pinned in requirements-dev.txt) runs every check it has against every operation of
the document, over HTTP, against the local runtime (`make run`'s, in-process): schema-valid
requests must be accepted (or refused only for credentials and absent resources), schema-invalid
ones refused, every status, header and body exactly as documented. Bounded: a fixed seed, a few
examples per operation and a time budget. schemathesis runs every operation through every phase
first and then fuzzes until the budget is spent, so the budget decides how deep it digs, not what it
covers: `make test` gives it 30 s (every operation, every check), `make contract` 120 s, and
JOINPLANE_SCHEMATHESIS_SECONDS / JOINPLANE_SCHEMATHESIS_EXAMPLES go deeper still.

A failure prints schemathesis's own report: the operation, the check, and a curl line that
reproduces it against `make run` (with its admin key in place of the test's).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from joinplane.contract import openapi
from joinplane_local.runtime import Runtime
from tests.support import ROOT
from tests.support.runtime import local_runtime

SEED = 20261130
MAX_EXAMPLES = int(os.environ.get("JOINPLANE_SCHEMATHESIS_EXAMPLES", "20"))
# schemathesis's own budget for the whole run, and the test's hard limit around it.
MAX_TIME_SECONDS = int(os.environ.get("JOINPLANE_SCHEMATHESIS_SECONDS", "30"))
HARD_LIMIT_SECONDS = MAX_TIME_SECONDS + 60
DOCUMENT = ROOT / "shared" / "openapi.json"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    with local_runtime() as running:
        yield running


def _ek_certificate(directory: Path) -> Path:
    """A certificate for the hook to send as `ekCertificatePem` (an EK certificate's shape is an
    ordinary X.509 certificate; the allow-list only takes the SPKI's hash from it)."""
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=contract-ek",
            "-days",
            "1",
            "-keyout",
            str(directory / "ek.key"),
            "-out",
            str(directory / "ek.pem"),
        ],
        check=True,
        capture_output=True,
    )
    return directory / "ek.pem"


def _operator_key(runtime: Runtime) -> str:
    """A platform-wide key for schemathesis that cannot write API keys. With `iam:api-keys:write`
    the fuzzer, which reuses identifiers it has seen in answers, revokes the very key it runs with
    (keyIds come back from apiKeys/list) and every later request is a 401 that tests nothing; so
    apiKeys/create and /revoke are exercised up to their 403."""
    assert runtime.admin_key
    body = {
        "tenantId": "dev",
        "grants": ["compute:*@platform", "audit:*@platform", "iam:api-keys:read@platform"],
        "description": "schemathesis",
    }
    request = urllib.request.Request(
        runtime.url + "/api/compute/apiKeys/create",
        data=json.dumps(body).encode(),
        headers={"authorization": f"Bearer {runtime.admin_key}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=15) as response:
        return str(json.loads(response.read())["key"])


def _config(key: str, report: Path) -> str:
    return f"""
seed = {SEED}
max-time = {MAX_TIME_SECONDS}
workers = 2
hooks = "tests.contract.schemathesis_hooks"

[generation]
max-examples = {MAX_EXAMPLES}
database = "none"
with-security-parameters = false

[cache]
enabled = false

[checks]
enabled = true

# A body over the limit is refused before it is parsed: 413 is a rejection too.
[checks.negative_data_rejection]
expected-statuses = [
  "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"
]

# API Gateway HTTP API answers a method no route has with 404 `{{"message":"Not Found"}}`, not 405
# with `Allow`, and the local runtime does the same so that it behaves as deployed. schemathesis's
# unexpected-method probes would flag every route for that; test_other_methods_are_not_found pins
# the gateway's answer instead.
[phases.coverage]
unexpected-methods = []

# The operator key for the operator API only (its security scheme): /machines/* and accept-join
# carry their own credentials (a join token, a machine token, X-Cluster-Key), and schemathesis
# generates none of those: random ones would only ever meet the credential check first. (Not
# per-operation `headers`: schemathesis 4.32.5 keeps one HTTP session per worker thread, made with
# the headers of the first operation it ran, so those leak into every other operation.)
# importCertificate: what makes a certificate importable (for the pool's pending key, a CA, chaining
# to a root) cannot be said in JSON Schema, so a schema-valid body is refused with 400, as documented
# (and tests/ca/test_upstream_api.py checks each refusal with openssl-made certificates).
[[operations]]
include-operation-id = "certificateAuthorities.importCertificate"
checks.positive_data_acceptance.expected-statuses = ["200", "400", "401", "403", "404", "409", "429"]

# activate: a schema-valid body is refused with 400 NO_PREPARED_CA unless the pool has a prepared CA
# (by that caId, when one is named), as documented; tests/ca/test_rotation_phases.py activates one.
[[operations]]
include-operation-id = "certificateAuthorities.activate"
checks.positive_data_acceptance.expected-statuses = ["200", "400", "401", "403", "404", "409", "429"]

# pools create and update: whether a join policy's `when` is CEL, refers to variables that exist and
# has the right types, and whether its rules' names are distinct, cannot be said in JSON Schema, so
# a schema-valid policy is refused with 400, as documented (docs/policy.md; tests/policy checks each).
[[operations]]
include-operation-id = "pools.create"
checks.positive_data_acceptance.expected-statuses = ["200", "400", "401", "403", "404", "409", "429"]

[[operations]]
include-operation-id = "pools.update"
checks.positive_data_acceptance.expected-statuses = ["200", "400", "401", "403", "404", "409", "429"]

# pools/simulatePolicy takes a draft policy: the same, its drafts compiled as pools/update compiles them.
[[operations]]
include-operation-id = "pools.simulatePolicy"
checks.positive_data_acceptance.expected-statuses = ["200", "400", "401", "403", "404", "409", "429"]

[auth.openapi.apiKey]
bearer = {json.dumps(key)}

[reports.junit]
enabled = true
path = {json.dumps(str(report))}

[output.sanitization]
enabled = false
"""


def test_the_server_answers_exactly_as_the_document_says(runtime: Runtime, tmp_path: Path) -> None:
    # Given the committed document, which is the generated one
    assert json.loads(DOCUMENT.read_text()) == openapi.document()
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(_operator_key(runtime), tmp_path / "junit.xml"))

    # When schemathesis runs every check against every operation of it
    started = time.monotonic()
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "schemathesis"),
            "--config-file",
            str(config),
            "--no-color",
            "run",
            str(DOCUMENT),
            "--url",
            runtime.url,
            "--checks",
            "all",
        ],
        capture_output=True,
        text=True,
        timeout=HARD_LIMIT_SECONDS,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "JOINPLANE_CONTRACT_EK_PEM": str(_ek_certificate(tmp_path)),
            "SCHEMATHESIS_TELEMETRY": "false",
        },
    )
    elapsed = time.monotonic() - started
    (tmp_path / "schemathesis.out").write_text(result.stdout + result.stderr)

    # Then it finds nothing, having tested every operation, within the budget
    report = result.stdout[:40000] + "\n...\n" + result.stdout[-6000:] + result.stderr[-4000:]
    assert result.returncode == 0, f"schemathesis found mismatches ({elapsed:.0f} s):\n{report}"
    operations = sum(1 for methods in json.loads(DOCUMENT.read_text())["paths"].values() for _ in methods)
    assert f"Tested: {operations}" in result.stdout, report
    # ... in every phase: a budget spent before fuzzing starts still exits 0 and says "Tested", with
    # fuzzing and stateful shown as never run (🕛) instead of passed
    summary = result.stdout.rpartition("Test Phases:")[2]
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in summary, f"{phase} did not run within {MAX_TIME_SECONDS} s:\n{report}"
    assert re.search(rf"Fuzzing \(in [0-9.]+s\)\s+✅ {operations} passed", result.stdout), report
    assert elapsed < HARD_LIMIT_SECONDS


@pytest.mark.parametrize(
    "method",
    [
        "GET",
        "PUT",
        "PATCH",
        "DELETE",
        "TRACE",
        "QUERY",
    ],
)
def test_other_methods_are_not_found(runtime: Runtime, method: str) -> None:
    # Given every documented route (all POST but GET /crl/{caId}), when it is called with a method
    # it does not document, then the gateway answers as API Gateway does: 404 {"message":"Not
    # Found"}, nothing runs
    host, port = runtime.url.removeprefix("http://").split(":")
    for path, operations in json.loads(DOCUMENT.read_text())["paths"].items():
        if method.lower() in operations:
            continue
        connection = http.client.HTTPConnection(host, int(port), timeout=15)
        try:
            connection.request(method, path, body=b"{}", headers={"content-type": "application/json"})
            response = connection.getresponse()
            assert (response.status, json.loads(response.read())) == (404, {"message": "Not Found"}), path
        finally:
            connection.close()
