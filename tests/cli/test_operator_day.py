"""An operator's day at the terminal: shared options before the command, several requests decided at
once, a queue followed as it changes, machines, tokens and CAs across pools, a pool's bootstrap set
from the CLI, and refusals that name the option typed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtime import Cli, command

pytestmark = pytest.mark.e2e


def _deferred(cli: Cli, token: str, directory: Path) -> str:
    deferred = cli.run("join", "--token", token, "--dir", str(directory), "-o", "json")
    assert deferred.code == 3, deferred.err
    return str(json.loads(deferred.out)["requestId"])


def _key_for(cli: Cli, *pools: str) -> dict[str, str]:
    grants = [item for pool in pools for item in ("--grant", f"compute:*@compute-pool/{pool}")]
    created = cli.ok("apikeys", "create", *grants, "-o", "json").json()
    return {"JOINPLANE_API_KEY": created["key"], "JOINPLANE_TENANT": ""}


def test_shared_options_are_taken_before_the_command_as_after_it(cli: Cli, tmp_path: Path) -> None:
    assert cli.runtime.admin_key
    # Given a config file whose `lab` profile is the runtime, and no URL or key in the environment
    config = tmp_path / "config.toml"
    config.write_text(f'[lab]\nurl = "{cli.runtime.url}"\napi-key = "{cli.runtime.admin_key}"\n')
    config.chmod(0o600)
    bare = {"JOINPLANE_URL": "", "JOINPLANE_API_KEY": "", "JOINPLANE_CONFIG": str(config)}
    pool = cli.new_pool()

    # When the shared options stand before the command
    as_json = cli.run("-o", "json", "pools", "get", pool)
    by_profile = cli.run("--profile", "lab", "-o", "json", "pools", "get", pool, env=bare)
    by_url = cli.run(
        "--url", cli.runtime.url, "--api-key", cli.runtime.admin_key, "pools", "get", pool, env=bare
    )
    after_wins = cli.run("-o", "json", "pools", "get", pool, "-o", "table")

    # Then they count as they do after it, and the one typed after the command wins
    assert as_json.code == 0, as_json.err
    assert as_json.json()["poolId"] == pool
    assert by_profile.code == 0 and by_profile.json()["poolId"] == pool, by_profile.err
    assert by_url.code == 0 and f"Pool {pool}:" in by_url.out, by_url.err
    assert after_wins.code == 0 and f"Pool {pool}:" in after_wins.out


def test_several_requests_are_decided_at_once_and_one_refused_stops_none_of_the_others(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a pool with two deferred joins, one of them already rejected
    pool = cli.new_pool()
    token = cli.new_token(pool, "--require-approval", "--max-uses", "2")
    first, second = (_deferred(cli, token, tmp_path / f"m{n}") for n in range(2))
    cli.ok("requests", "reject", first, "--reason", "not ours")

    # When the operator approves both in one command, one id twice
    both = cli.run("requests", "approve", first, second, second, "--reason", "rack 4 checked", "-o", "json")
    shown = cli.run("requests", "list", "--pool", pool, "--state", "all", "-o", "json")

    # Then the pending one is approved once, the rejected one is said and counted in the exit
    assert both.code == 1, both.err
    document = both.json()
    assert [(r["requestId"], r["state"]) for r in document["requests"]] == [(second, "approved")]
    assert [(r["requestId"], r["code"]) for r in document["refused"]] == [(first, "INVALID_STATE")]
    assert f"joinplane: {first}: INVALID_STATE" in both.err
    states = {r["requestId"]: r["state"] for r in shown.json()["requests"]}
    assert states == {first: "rejected", second: "approved"}


def test_a_watched_queue_shows_a_new_request_and_what_became_of_it(cli: Cli, tmp_path: Path) -> None:
    # Given an empty queue being watched, reading it every 0.2 seconds
    pool = cli.new_pool()
    watch = cli.start("requests", "list", "--pool", pool, "--watch", "--interval", "0.2s", "-o", "json")
    stop = threading.Timer(60, watch.kill)  # a watch that never says anything fails the test, not the suite
    stop.start()
    lines: list[dict[str, Any]] = []
    try:
        assert watch.stdout is not None
        # When a machine asks to join, and the operator approves it
        request = _deferred(cli, cli.new_token(pool, "--require-approval"), tmp_path / "m")
        lines.append(json.loads(watch.stdout.readline()))
        cli.ok("requests", "approve", request)
        lines.append(json.loads(watch.stdout.readline()))
        # And the watch is stopped as a service manager stops it
        watch.send_signal(signal.SIGTERM)
        code = watch.wait(timeout=30)
    finally:
        stop.cancel()
        if watch.poll() is None:
            watch.kill()

    # Then it showed the request arriving, then leaving the pending queue approved, and stopped cleanly
    assert [(line["type"], line["request"]["requestId"]) for line in lines] == [
        ("ADDED", request),
        ("REMOVED", request),
    ]
    assert (lines[0]["request"]["state"], lines[1]["request"]["state"]) == ("pending", "approved")
    assert code == 130


def test_machines_tokens_and_cas_are_listed_across_the_pools_a_key_sees(cli: Cli, tmp_path: Path) -> None:
    # Given two pools, each with a joined machine, and a key for those two pools only
    pools = [cli.new_pool(), cli.new_pool()]
    machines = {}
    for index, pool in enumerate(pools):
        joined = cli.ok(
            "join", "--token", cli.new_token(pool), "--dir", str(tmp_path / f"m{index}"), "-o", "json"
        )
        machines[joined.json()["machineId"]] = pool
    key = _key_for(cli, *pools)

    # When that key lists machines, tokens and CAs without a pool
    listed = cli.run("machines", "list", "-o", "json", env=key)
    table = cli.run("machines", "list", env=key)
    tokens = cli.run("tokens", "list", "-o", "json", env=key)
    authorities = cli.run("ca", "get", "-o", "json", env=key)
    ca_table = cli.run("ca", "get", env=key)
    cursor = cli.run("machines", "list", "--cursor", "mach_x", env=key)

    # Then each pool's are shown, with their pool
    assert listed.code == 0, listed.err
    assert {m["machineId"]: m["poolId"] for m in listed.json()["machines"]} == machines
    assert "POOL" in table.out.splitlines()[0] and all(pool in table.out for pool in pools)
    assert tokens.code == 0, tokens.err
    assert sorted(t["poolId"] for t in tokens.json()["joinTokens"]) == sorted(pools)
    assert authorities.code == 0, authorities.err
    assert sorted(c["poolId"] for c in authorities.json()["certificateAuthorities"]) == sorted(pools)
    assert all(c["active"]["caId"] in ca_table.out for c in authorities.json()["certificateAuthorities"])
    # And a cursor, which continues one pool's list, asks for that pool
    assert cursor.code == 2 and "--cursor continues one pool's list: give its --pool" in cursor.err


def test_a_pool_made_on_the_cli_hands_machines_the_control_plane_it_was_given(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a pool made with a control plane URL, and one made without
    pool = cli.new_pool(controlplane_url="https://cp.example.com")
    bare = cli.run("pools", "create", f"p-{uuid.uuid4().hex[:10]}", "--site", "site-cli")
    # When a machine joins the first, and its bootstrap changes by a file, then by one field
    cli.ok("join", "--token", cli.new_token(pool), "--dir", str(tmp_path / "m"))
    handed = json.loads((tmp_path / "m" / "bootstrap.json").read_text())
    settings = tmp_path / "bootstrap.json"
    settings.write_text(json.dumps({"transport": "grpc", "controlplaneHttpUrl": "https://old.example.com"}))
    cli.ok("pools", "update", pool, "--bootstrap", str(settings))
    cli.ok("pools", "update", pool, "--controlplane-url", "https://cp2.example.com")
    shown = cli.ok("pools", "get", pool, "-o", "json").json()
    not_json = tmp_path / "bad.json"
    not_json.write_text("[1, 2]")
    refused = cli.run("pools", "update", pool, "--bootstrap", str(not_json))
    not_a_url = cli.run("pools", "update", pool, "--controlplane-url", "cp.example.com")

    # Then the machine got the URL, the one-field change kept the file's other fields, and the one
    # made without is told what its machines lack
    assert handed["controlplaneHttpUrl"] == "https://cp.example.com"
    assert shown["bootstrap"] == {"transport": "grpc", "controlplaneHttpUrl": "https://cp2.example.com"}
    assert bare.code == 0 and "hands its machines no controlplaneHttpUrl" in bare.err
    assert refused.code == 2 and "must hold a JSON object" in refused.err
    assert not_a_url.code == 2 and "--controlplane-url must be an http:// or https:// URL" in not_a_url.err


def test_a_refused_value_is_named_by_the_option_that_set_it(cli: Cli) -> None:
    # Given a pool
    pool = cli.new_pool()
    # When values out of the server's range are typed
    short = cli.run("tokens", "create", "--pool", pool, "--ttl", "30s")
    long = cli.run("tokens", "create", "--pool", pool, "--ttl", "5w")
    certificate = cli.run("pools", "update", pool, "--certificate-ttl", "1m")
    uses = cli.run("tokens", "create", "--pool", pool, "--max-uses", "0")
    # Then each refusal names the option, with the bound in the option's own units
    assert short.code == 1 and "joinplane: --ttl: must be at least 1m" in short.err, short.err
    assert "joinplane: --ttl: must be at most 30d" in long.err, long.err
    assert "joinplane: --certificate-ttl: must be at least 5m" in certificate.err, certificate.err
    assert "joinplane: --max-uses: must be at least 1" in uses.err, uses.err
    assert "ttlSeconds" not in short.err + long.err


def test_the_cli_answers_version_without_loading_the_agent() -> None:
    # When `--version` is asked for, with imports traced
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            "from joinplane_cli import main; main.main(['--version'])",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # Then the parser's modules were imported, and no module doing a command's work (the agent's,
    # the operator's) nor cryptography
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert {"joinplane_cli.main", "joinplane_cli.agent_commands", "joinplane_cli.admin_commands"} <= imported
    operators = {n for n in imported if n.startswith("joinplane_cli.admin") and not n.endswith("_commands")}
    assert not operators
    machines = {"joinplane_cli.agent", "joinplane_cli.renew", "joinplane_cli.service", "cryptography"}
    assert not machines & imported


COMPLETE = """
source <("$1" completion bash)
t() {
    COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
    _joinplane; echo "${COMPREPLY[*]}"
}
t "$1" pools get ''
t "$1" -o json machines list --pool ''
t "$1" requests approve ''
t "$1" join --dir "$2/"
t "$1" --url http://127.0.0.1:9 pools get ''
"""


def test_completion_offers_the_servers_pool_and_request_ids_and_directories_for_dir(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a pool with a pending request, and a directory holding a file and a directory
    pool = cli.new_pool()
    request = _deferred(cli, cli.new_token(pool, "--require-approval"), tmp_path / "m")
    (tmp_path / "place").mkdir()
    (tmp_path / "place" / "a-file").write_text("x")
    (tmp_path / "place" / "a-dir").mkdir()
    program = tmp_path / "joinplane"
    program.write_text("#!/bin/sh\nexec " + " ".join(command()) + ' "$@"\n')
    program.chmod(0o755)

    # When bash completes where a pool, a request or a directory goes
    done = subprocess.run(
        ["bash", "-c", COMPLETE, "bash", str(program), str(tmp_path / "place")],
        capture_output=True,
        text=True,
        env=cli.env,
        timeout=120,
        check=False,
    )

    # Then the server's ids are offered, directories alone for --dir, and nothing from a server that
    # the line's own --url says is elsewhere
    assert done.returncode == 0, done.stderr
    pools, pool_options, requests, directories, elsewhere = done.stdout.splitlines()
    assert pool in pools.split() and pool in pool_options.split()
    assert request in requests.split()
    assert directories.split() == [str(tmp_path / "place" / "a-dir")]
    assert elsewhere == ""
