"""docs/policy.md's examples are policies an operator can copy: each JSON block compiles, and does
what its words say on a join made for it."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from joinplane import policy
from joinplane.policy_rules import PolicyRule
from tests.support import ROOT

BLOCKS = re.findall(r"```json\n(.*?)```", (ROOT / "docs" / "policy.md").read_text(), re.DOTALL)


def examples() -> dict[str, list[PolicyRule]]:
    found = {}
    for block in BLOCKS:
        document = json.loads(block)
        if isinstance(document, list):
            rules = [PolicyRule.model_validate(rule) for rule in document]
            found[rules[0].name] = rules
    return found


def test_every_example_compiles() -> None:
    # Given the page's example policies
    found = examples()
    assert set(found) >= {"rack-7-gpus", "lab", "tpm-verified", "office-hours", "gpu-hosts"}
    # Then each compiles as saving it would
    for rules in found.values():
        policy.compile_policy(rules)


def test_the_examples_decide_as_they_say() -> None:
    # Given the examples, and a sample join of the lab site, on a Saturday night
    found = examples()
    join = policy.sample_activation()
    join["site"]["id"], join["now"] = "lab", datetime(2026, 1, 3, 23, tzinfo=UTC)
    join["request"]["hardware"]["serialNumber"] = "SN-7A02"

    def decision(name: str) -> str | None:
        outcome = policy.evaluate(policy.compile_policy(found[name]), join)
        return outcome.decision if outcome else None

    # Then each decides as its words say
    assert decision("rack-7-gpus") == "approve"
    assert decision("lab") == "approve"
    assert decision("tpm-verified") == "approve"
    assert decision("office-hours") == "deny"
    assert decision("gpu-hosts") is None  # gpu-sample-1 is not gpu-NNN
