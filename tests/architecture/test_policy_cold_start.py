"""Join policies cost nothing to a join whose pool has none: it imports neither the policy code nor
the CEL engine; and the engine, when loaded, loads without its package's command-line tool
(docs/policy.md, "The CEL implementation")."""

from __future__ import annotations

import importlib.abc
import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support import ROOT, call, join

POLICY_MODULES = ("joinplane.policy", "joinplane.join_policy", "cel", "cel.cel")
CLI_OF_THE_ENGINE = ("cel", "typer", "rich", "prompt_toolkit", "pygments")


class _Forbidden(importlib.abc.MetaPathFinder):
    """Fails any import of the policy code or the engine while installed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name in POLICY_MODULES:
            raise AssertionError(f"a join to a pool without a policy imported {name}")


def test_a_join_to_a_pool_without_a_policy_loads_no_policy_code(
    admin_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool without a policy, its token, none of the policy code loaded and importing it failing
    pool = {"tenantId": "acme", "poolId": "plain", "siteId": "s", "name": "n", "workspaceId": "w"}
    assert call("/api/compute/pools/create", pool, admin_key).status == 200
    token = call("/api/compute/joinTokens/create", {"tenantId": "acme", "poolId": "plain"}, admin_key).body[
        "token"
    ]
    for name in POLICY_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
        package, _, module = name.rpartition(".")
        if package in sys.modules:
            monkeypatch.delattr(sys.modules[package], module, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Forbidden(), *sys.meta_path])

    # When a machine joins
    reply = join({"joinToken": token, "machineFingerprint": "fp-plain", "hostname": "gpu-1"})

    # Then it is admitted, and nothing of the policies was imported
    assert reply.status == 200, reply.body
    assert not [m for m in sys.modules if m in POLICY_MODULES]


def test_the_engine_loads_without_its_packages_command_line_tool() -> None:
    # Given a fresh interpreter
    script = (
        "import json, sys\n"
        "from joinplane import policy\n"
        "from joinplane.policy_rules import PolicyRule\n"
        "rules = [PolicyRule(name='gpu', when='request.hostname.startsWith(\"gpu-\")', decision='approve')]\n"
        "outcome = policy.evaluate(policy.compile_policy(rules), policy.sample_activation())\n"
        f"tool = sorted(m for m in sys.modules if m.split('.')[0] in {CLI_OF_THE_ENGINE!r})\n"
        "print(json.dumps([outcome.rule, tool]))\n"
    )
    # When it compiles and evaluates a policy
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    # Then the rule matched (the engine ran), and neither the package nor its tool was imported
    assert json.loads(run.stdout) == ["gpu", []]
