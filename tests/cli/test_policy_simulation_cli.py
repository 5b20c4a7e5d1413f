"""`joinplane pools simulate POOL --policy FILE`: a draft join policy tried on the pool's joins from the
terminal, as a table with its counts or as the API's JSON, and a draft refused before or by the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.runtime import Cli

pytestmark = pytest.mark.e2e


def test_an_operator_tries_a_draft_policy_on_the_pools_joins(cli: Cli, tmp_path: Path) -> None:
    # Given a pool where one machine's join waits for an operator (its token requires approval)
    pool = cli.new_pool()
    token = cli.new_token(pool, "--require-approval")
    deferred = cli.run("join", "--token", token, "--dir", str(tmp_path / "m"), "-o", "json")
    assert deferred.code == 3, deferred.err
    request_id = json.loads(deferred.out)["requestId"]
    # And a draft that approves every machine, as `pools get -o json` would hold it
    draft = tmp_path / "draft.json"
    rule = {"name": "everyone", "when": "true", "decision": "approve", "reason": "trial"}
    draft.write_text(json.dumps({"joinPolicy": [rule]}))

    # When the operator simulates it, as a table and as JSON
    table = cli.ok("pools", "simulate", pool, "--policy", str(draft))
    as_json = cli.ok("pools", "simulate", pool, "--policy", str(draft), "--changed", "-o", "json").json()

    # Then the deferred join is shown with what the draft would do, and the counts
    [line] = [line for line in table.out.splitlines() if request_id in line]
    assert "deferred" in line and "admit" in line and "everyone" in line and "CHANGE" in line
    assert (
        "1 joins: 1 would be admitted, 0 deferred, 0 denied; 1 would change (1 deferred → admit" in table.out
    )
    assert [(i["id"], i["decision"], i["rule"]) for i in as_json["items"]] == [
        (request_id, "admit", "everyone")
    ]
    assert as_json["counts"]["deferredWouldAdmit"] == 1


def test_a_draft_that_is_not_a_list_of_rules_or_does_not_compile_is_refused(cli: Cli, tmp_path: Path) -> None:
    # Given a pool, a file that is not JSON and a draft whose rule does not parse
    pool = cli.new_pool()
    garbage, broken = tmp_path / "garbage.json", tmp_path / "broken.json"
    garbage.write_text("when: true")
    broken.write_text(json.dumps([{"name": "typo", "when": "request.hostname ==", "decision": "deny"}]))

    # When each is simulated
    not_json = cli.run("pools", "simulate", pool, "--policy", str(garbage))
    not_compiled = cli.run("pools", "simulate", pool, "--policy", str(broken))

    # Then the file is refused before any call, and the rule by the API, naming where it fails
    assert not_json.code == 2 and f"--policy {garbage} is not JSON" in not_json.err
    assert not_compiled.code == 1
    assert "--policy (0.when), rule typo: line 1, column 20: Syntax error" in not_compiled.err
