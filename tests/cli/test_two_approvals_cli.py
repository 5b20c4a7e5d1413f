"""A pool that needs two approvals, at the terminal: set with `pools update --approvals-required`,
and a request's page and the queue say where it stands ("1 of 2 approvals (by key_...)")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.runtime import Cli

pytestmark = pytest.mark.e2e


def test_a_two_approval_pool_shows_each_approval_until_the_second_key_approves(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a pool set to need two approvals, a machine waiting, and two operators' keys
    pool = cli.new_pool()
    updated = cli.ok("pools", "update", pool, "--approvals-required", "2", "-o", "json").json()
    token = cli.new_token(pool, "--require-approval")
    deferred = cli.run("join", "--token", token, "--dir", str(tmp_path / "m"), "-o", "json")
    assert deferred.code == 3, deferred.err
    request = str(json.loads(deferred.out)["requestId"])
    alice, bob = (
        cli.ok("apikeys", "create", "--grant", f"compute:*@compute-pool/{pool}", "-o", "json").json()
        for _ in range(2)
    )
    as_alice = {"JOINPLANE_API_KEY": alice["key"]}
    as_bob = {"JOINPLANE_API_KEY": bob["key"]}

    # When the first approves, and the request and the queue are read
    first = cli.run("requests", "approve", request, env=as_alice)
    shown = cli.ok("requests", "get", request)
    queue = cli.ok("requests", "list", "--pool", pool)
    # Then each says one approval of two, by whom, and that the machine still waits
    standing = f"1 of 2 approvals (by {alice['keyId']})"
    assert updated["approvalsRequired"] == 2
    assert first.code == 0 and standing in first.out and "waits" in first.out, first.err + first.out
    assert standing in shown.out and "pending" in shown.out
    assert "1 of 2 approvals" in queue.out

    # When the second approves, Then the request is approved
    second = cli.run("requests", "approve", request, "-o", "json", env=as_bob)
    assert second.code == 0 and second.json()["state"] == "approved", second.err
    assert [a["by"] for a in second.json()["approvals"]] == [alice["keyId"], bob["keyId"]]

    # And a count out of range is refused before it is sent
    refused = cli.run("pools", "update", pool, "--approvals-required", "4")
    assert refused.code == 2 and "--approvals-required" in refused.err
