"""The packaged artifact, as Lambda runs it: each function's handler imported from .aws-sam/build
with the built layer on the path and nothing else but what the python3.11 runtime ships (boto3 and
its dependencies, installed alone into .lambda-runtime by `make runtime`). A dependency missing from
the layer's requirements, or a handler that only works from the source tree, fails here.

`make test` builds first and sets JOINPLANE_REQUIRE_BUILD=1, so these never skip in CI."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from joinplane_local.seed import install_admin_key
from joinplane_local.template import load
from tests.support import ROOT, http_event

BUILD = ROOT / ".aws-sam" / "build"
RUNTIME = ROOT / ".lambda-runtime"

if not (BUILD / "template.yaml").exists() or not (RUNTIME / ".stamp").exists():
    if os.environ.get("JOINPLANE_REQUIRE_BUILD") == "1":
        raise RuntimeError("no sam build output: run `make build runtime` first")
    pytest.skip("no sam build output (make test builds it)", allow_module_level=True)

# Runs inside a bare interpreter (-I -S: no site-packages, no PYTHON* variables), as /var/task + /opt/python.
DRIVER = """
import json, sys
task, layer, runtime = sys.argv[1:4]
sys.path[:0] = [task, layer, runtime]
import app
event = json.loads(sys.stdin.read())
class Context:
    function_name = "packaged"; memory_limit_in_mb = 1024; aws_request_id = "req-1"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:packaged"
    def get_remaining_time_in_millis(self): return 10000
print(json.dumps(app.lambda_handler(event, Context())))
"""


def invoke_built(logical_id: str, event: dict[str, Any]) -> Any:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("AWS_", "TABLE_NAME", "EVENT_BUS_NAME", "KMS_", "PYDANTIC_"))
    }
    completed = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            DRIVER,
            str(BUILD / logical_id),
            str(BUILD / "DomainLayer" / "python"),
            str(RUNTIME),
        ],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def admin_context(key: str) -> dict[str, Any]:
    from joinplane import keyauth

    return keyauth.authorizer_context(keyauth.verify(key))


def route_event(path: str, body: dict[str, Any], key: str) -> dict[str, Any]:
    return http_event(
        path, json.dumps(body), {"authorization": f"Bearer {key}"}, authorizer=admin_context(key)
    )


def built_functions() -> set[str]:
    return {
        name
        for name, resource in load(BUILD / "template.yaml")["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def _pool(key: str) -> None:
    from tests.support import call

    reply = call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "built", "siteId": "s", "name": "Built", "workspaceId": "w"},
        key,
    )
    assert reply.status == 200, reply.body


def _join_event(key: str) -> dict[str, Any]:
    """A CSR join: proves the layer's cryptography works in a bare interpreter."""
    import tempfile

    from tests.support import call, openssl_csr

    _pool(key)
    token = call("/api/compute/joinTokens/create", {"tenantId": "acme", "poolId": "built"}, key).body["token"]
    csr = openssl_csr(Path(tempfile.mkdtemp()))
    return http_event("/machines/join", json.dumps({"joinToken": token, "csr": csr}))


def _stream_event(key: str) -> dict[str, Any]:
    from joinplane.dal import dynamo

    image = {
        "pk": "JREQ#jreq_01m8nyzdwtnzdtnbrhz7qbzdv4",
        "sk": "JREQ",
        "requestId": "jreq_01m8nyzdwtnzdtnbrhz7qbzdv4",
        "tenantId": "acme",
        "siteId": "s",
        "poolId": "built",
        "state": "pending",
        "createdAt": "2026-11-30T10:00:00Z",
        "expiresAt": "2026-12-01T10:00:00Z",
        "reasons": [],
    }
    return {
        "Records": [
            {
                "eventName": "INSERT",
                "dynamodb": {
                    "SequenceNumber": "1",
                    "NewImage": dynamo.serialize(image),
                    "Keys": dynamo.serialize({"pk": image["pk"], "sk": "JREQ"}),
                },
            }
        ]
    }


def _cluster_preflight(key: str) -> dict[str, Any]:
    from tests.support import call

    _pool(key)
    cluster_key = call("/api/compute/clusters/rotateKey", {"tenantId": "acme", "poolId": "built"}, key).body
    body = {
        "nodeId": "n1",
        "nodeIp": "10.0.0.1",
        "nodeVersion": "1",
        "preflight": True,
        "inventory": {
            "entries": [],
            "conflicts": [],
            "digest": "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
        },
    }
    return http_event("/cluster/accept-join", json.dumps(body), {"x-cluster-key": cluster_key["clusterKey"]})


def _console_page(key: str) -> dict[str, Any]:
    """GET /console: the page is read from the layer's joinplane_console/ folder."""
    event = http_event("/console", "")
    event["routeKey"] = event["requestContext"]["routeKey"] = "GET /console"
    event["requestContext"]["http"]["method"] = "GET"
    return event


def _ok(result: dict[str, Any], key: str = "") -> bool:
    body = json.loads(result["body"])
    return result["statusCode"] == 200 and (not key or key in body)


Case = tuple[Callable[[str], dict[str, Any]], Callable[[Any], bool]]
CASES: dict[str, Case] = {
    "AuthorizerFunction": (
        lambda key: http_event("/api/compute/pools/list", "", {"authorization": f"Bearer {key}"}),
        lambda r: r["isAuthorized"] and r["context"]["tenantId"] == "acme",
    ),
    "ApiKeysFunction": (
        lambda key: route_event("/api/compute/apiKeys/list", {"tenantId": "acme"}, key),
        lambda r: _ok(r, "apiKeys"),
    ),
    "PoolsFunction": (
        lambda key: route_event(
            "/api/compute/pools/create",
            {"tenantId": "acme", "poolId": "built", "siteId": "s", "name": "Built", "workspaceId": "w"},
            key,
        ),
        lambda r: _ok(r) and json.loads(r["body"])["state"] == "active",
    ),
    "JoinTokensFunction": (
        lambda key: route_event("/api/compute/joinTokens/list", {"tenantId": "acme", "poolId": "nope"}, key),
        lambda r: r["statusCode"] == 404,
    ),
    "MachineJoinFunction": (
        _join_event,
        lambda r: r["statusCode"] == 200 and "BEGIN CERTIFICATE" in json.loads(r["body"])["certificate"],
    ),
    "CertificateAuthoritiesFunction": (
        lambda key: (
            _pool(key),
            route_event(
                "/api/compute/certificateAuthorities/get", {"tenantId": "acme", "poolId": "built"}, key
            ),
        )[1],
        lambda r: _ok(r, "bundle") and "BEGIN CERTIFICATE" in json.loads(r["body"])["active"]["certificate"],
    ),
    "MachinesFunction": (
        lambda key: (
            _pool(key),
            route_event("/api/compute/machines/list", {"tenantId": "acme", "poolId": "built"}, key),
        )[1],
        lambda r: _ok(r, "machines"),
    ),
    "JoinRequestsFunction": (
        lambda key: (
            _pool(key),
            route_event("/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "built"}, key),
        )[1],
        lambda r: _ok(r, "requests"),
    ),
    "DiscoveryFunction": (
        lambda key: (
            _pool(key),
            route_event("/api/compute/discovery/list", {"tenantId": "acme", "siteId": "s"}, key),
        )[1],
        lambda r: _ok(r, "entries"),
    ),
    "TpmAllowListFunction": (
        lambda key: (
            _pool(key),
            route_event("/api/compute/tpmAllowList/list", {"tenantId": "acme", "siteId": "s"}, key),
        )[1],
        lambda r: r["statusCode"] == 200,
    ),
    "AuditEventsFunction": (
        lambda key: route_event("/api/compute/auditEvents/list", {"tenantId": "acme"}, key),
        lambda r: _ok(r, "events"),
    ),
    "EventPublisherFunction": (_stream_event, lambda r: r == {"batchItemFailures": []}),
    "AuditConsumerFunction": (
        lambda key: {
            "source": "joinplane",
            "detail-type": "security.machine.revoked",
            "detail": {
                "eventId": "evt_" + "0" * 32,
                "occurredAt": "2026-11-30T10:00:00Z",
                "tenantId": "acme",
                "poolId": "built",
                "machineId": "mach_x",
            },
        },
        lambda r: r["stored"] is True,
    ),
    "ClustersFunction": (
        lambda key: (
            _pool(key),
            route_event("/api/compute/clusters/rotateKey", {"tenantId": "acme", "poolId": "built"}, key),
        )[1],
        lambda r: _ok(r, "clusterKey"),
    ),
    "ClusterJoinFunction": (
        _cluster_preflight,
        lambda r: (
            r["statusCode"] == 200 and json.loads(r["body"])["message"] == "cluster_join_preflight_passed"
        ),
    ),
    "ConsoleFunction": (
        _console_page,
        lambda r: (
            r["statusCode"] == 200 and b"<title>Joinplane console</title>" in base64.b64decode(r["body"])
        ),
    ),
    "RetentionFunction": (
        lambda key: {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}},
        lambda r: r == {"expired": 0},
    ),
}


def test_every_built_function_has_a_case() -> None:
    assert built_functions() == set(CASES)


@pytest.mark.parametrize("logical_id", sorted(CASES))
def test_built_handler_runs_from_the_artifact(table: str, logical_id: str) -> None:
    # Given a platform admin in the table the built function will reach through AWS_ENDPOINT_URL
    key = install_admin_key("acme", None, "packaged")
    make_event, expected = CASES[logical_id]
    event = make_event(key)
    # When the built handler is imported and invoked in a bare interpreter
    result = invoke_built(logical_id, event)
    # Then it answers as the source tree does
    assert expected(result), result


def test_the_layer_does_not_ship_boto3() -> None:
    # boto3 comes from the Lambda runtime; shipping a second copy would only slow cold starts
    assert not (BUILD / "DomainLayer" / "python" / "boto3").exists()


def test_the_layer_carries_the_join_policy_engine() -> None:
    # Given a bare interpreter with only the built layer and the runtime's boto3 on its path, as on Lambda
    script = (
        "import sys; sys.path[:0] = sys.argv[1:3]\n"
        "from joinplane import policy\n"
        "from joinplane.policy_rules import PolicyRule\n"
        "rule = PolicyRule(name='gpu', when='request.hostname.startsWith(\"gpu-\")', decision='approve')\n"
        "print(policy.evaluate(policy.compile_policy([rule]), policy.sample_activation()).rule)\n"
    )
    # When a policy is compiled and evaluated there
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(BUILD / "DomainLayer" / "python"), str(RUNTIME)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then the CEL engine sam packaged for the function's architecture ran it
    assert run.stdout.strip() == "gpu", run.stderr
