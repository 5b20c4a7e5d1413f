"""`joinplane pools update --policy FILE`: a pool's join policy from a JSON file, refused with the
rule and the position, shown, and removed with `none` (docs/policy.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.runtime import Cli

pytestmark = pytest.mark.e2e

RULES = [
    {"name": "gpu-hosts", "when": 'request.hostname.startsWith("gpu-")', "decision": "approve"},
    {"name": "the-rest", "when": "true", "decision": "defer"},
]


def test_a_policy_file_is_set_shown_refused_when_broken_and_removed(cli: Cli, tmp_path: Path) -> None:
    # Given a pool, a policy file, a broken one and a file that is not JSON
    pool = cli.new_pool()
    good, broken, garbage = tmp_path / "good.json", tmp_path / "broken.json", tmp_path / "garbage.json"
    good.write_text(json.dumps(RULES))
    broken.write_text(json.dumps([{**RULES[0], "when": 'request.hostname.startsWith("gpu-"'}]))
    garbage.write_text("- name: yaml")

    # When each is given to pools update, then `none`
    saved = cli.ok("pools", "update", pool, "--policy", str(good), "-o", "json").json()
    shown = cli.ok("pools", "get", pool)
    refused = cli.run("pools", "update", pool, "--policy", str(broken))
    unreadable = cli.run("pools", "update", pool, "--policy", str(garbage))
    removed = cli.ok("pools", "update", pool, "--policy", "none", "-o", "json").json()

    # Then the policy is saved and shown one rule a line, the broken one refused naming the option,
    # the rule's place, its name and the position, the garbage one refused before any call, and
    # `none` removes it
    assert [r["name"] for r in saved["joinPolicy"]] == ["gpu-hosts", "the-rest"]
    policy_lines = shown.out.split("join policy", 1)[1].splitlines()
    assert policy_lines[0].strip() == 'approve gpu-hosts: request.hostname.startsWith("gpu-")'
    assert policy_lines[1].strip() == "defer the-rest: true"
    assert refused.code != 0
    assert "--policy (0.when), rule gpu-hosts: line 1, column 35" in refused.err, refused.err
    assert unreadable.code == 2 and "not JSON" in unreadable.err
    assert removed["joinPolicy"] == []
