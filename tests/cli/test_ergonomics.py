"""What a newcomer at a terminal expects of `joinplane`: durations in words, the tenant taken from the API
key, a config file with profiles, hints for a token in the wrong place or a URL that is not the API,
pools update, machines get, API keys, and the queue of every pool the key sees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.runtime import Cli

pytestmark = pytest.mark.e2e

UNSET = {"JOINPLANE_URL": "", "JOINPLANE_API_KEY": "", "JOINPLANE_TENANT": ""}


def test_durations_are_taken_in_words_wherever_seconds_are(cli: Cli) -> None:
    # When a pool and a token are made with durations in words
    pool = cli.new_pool(certificate_ttl="5m", join_request_ttl="1h30m")
    shown = cli.ok("pools", "get", pool, "-o", "json").json()
    token = cli.ok("tokens", "create", "--pool", pool, "--ttl", "1d", "-o", "json").json()
    wrong = cli.run("tokens", "create", "--pool", pool, "--ttl", "1 fortnight")

    # Then the server got seconds
    assert (shown["certificateTtlSeconds"], shown["joinRequestTtlSeconds"]) == (300, 5400)
    assert token["expiresAt"] > token["createdAt"]
    made = cli.ok("tokens", "list", "--pool", pool).out
    assert "in 1 day" in made
    # And a duration it cannot read is a usage error that says what it takes
    assert wrong.code == 2
    assert "is not a duration (seconds, or a number with s, m, h, d or w: 90m, 1h, 1d)" in wrong.err


def test_a_token_that_wants_the_tpm_prints_the_join_command_with_tpm(cli: Cli, tmp_path: Path) -> None:
    # Given a pool
    pool = cli.new_pool()
    # When a token that requires the TPM, and one that does not, are created into files
    wanting = cli.ok(
        "tokens", "create", "--pool", pool, "--tpm", "require", "--token-out", str(tmp_path / "t1")
    )
    plain = cli.ok("tokens", "create", "--pool", pool, "--token-out", str(tmp_path / "t2"))
    # Then the first says so, and the command it prints for the machine attests with the TPM
    assert ", TPM require (joins with --tpm)." in wanting.out.splitlines()[0]
    assert wanting.out.rstrip().endswith(f"--token-file {tmp_path / 't1'} --wait --tpm")
    assert "TPM" not in plain.out and plain.out.rstrip().endswith("--wait")
    # And so does the one printed with the secret itself
    shown = cli.ok("tokens", "create", "--pool", pool, "--tpm", "defer-unlisted")
    assert shown.out.rstrip().endswith("--wait --tpm")


def test_the_tenant_is_the_api_keys_own_when_not_given(cli: Cli) -> None:
    # Given no tenant anywhere
    env = {"JOINPLANE_TENANT": ""}
    # When the operator lists pools and asks who the key is
    pools = cli.run("pools", "list", "-o", "json", env=env)
    me = cli.run("apikeys", "whoami", "-o", "json", env=env)
    # Then the key's tenant was used
    assert pools.code == 0, pools.err
    assert me.code == 0, me.err
    assert me.json()["tenantId"] == "dev"
    assert "key" not in me.json()  # never the secret


def test_pools_update_changes_only_what_is_given(cli: Cli) -> None:
    # Given a pool
    pool = cli.new_pool(name="Before", workspace="ws-before")
    # When its name and certificate lifetime change, and an update without changes is asked for
    updated = cli.ok(
        "pools", "update", pool, "--name", "After", "--certificate-ttl", "2h", "-o", "json"
    ).json()
    empty = cli.run("pools", "update", pool)
    # Then the rest stays as it was
    assert (updated["name"], updated["certificateTtlSeconds"], updated["workspaceId"]) == (
        "After",
        7200,
        "ws-before",
    )
    assert empty.code == 2 and "nothing to change" in empty.err


def test_an_api_key_is_created_used_listed_and_revoked(cli: Cli) -> None:
    # Given a pool
    pool = cli.new_pool()
    # When an operator makes a key for that pool only, and uses it without saying the tenant
    created = cli.ok(
        "apikeys",
        "create",
        "--grant",
        f"compute:*@compute-pool/{pool}",
        "--description",
        "rack 1 ops",
        "-o",
        "json",
    ).json()
    as_new = {"JOINPLANE_API_KEY": created["key"], "JOINPLANE_TENANT": ""}
    seen = cli.run("pools", "get", pool, "-o", "json", env=as_new)
    listed = cli.ok("apikeys", "list", "--all", "-o", "json").json()["apiKeys"]
    revoked = cli.ok("apikeys", "revoke", created["keyId"], "-o", "json").json()
    # (whoami reads the key's record: the authorizer may cache a revoked key for a while on other routes)
    refused = cli.run("apikeys", "whoami", env=as_new)

    # Then the key works for its pool, is listed (without its secret), and is refused once revoked
    assert created["key"].startswith("jpk_")
    assert seen.code == 0 and seen.json()["poolId"] == pool, seen.err
    mine = [k for k in listed if k["keyId"] == created["keyId"]]
    assert mine and mine[0]["description"] == "rack 1 ops" and "key" not in mine[0]
    assert revoked["state"] == "revoked"
    assert refused.code == 8, refused.err


def test_a_machine_is_shown_by_its_id(cli: Cli, tmp_path: Path) -> None:
    # Given a joined machine that renewed its certificate once, with the same key
    pool = cli.new_pool()
    joined = cli.ok("join", "--token", cli.new_token(pool), "--dir", str(tmp_path / "m"), "-o", "json").json()
    cli.ok("renew", "--dir", str(tmp_path / "m"))
    # When the operator asks for it by id
    shown = cli.ok("machines", "get", joined["machineId"], "-o", "json").json()
    table = cli.ok("machines", "get", joined["machineId"]).out
    # Then it is that machine, in its pool
    assert (shown["machineId"], shown["poolId"], shown["state"]) == (joined["machineId"], pool, "active")
    assert f"Machine {joined['machineId']}:" in table
    # And the renewal, no security event, shows: when, and both certificates its key holds
    serials = [c["serial"] for c in shown["certificates"]]
    assert len(serials) == 2 and serials[-1] == shown["certificateSerial"]
    assert shown["lastRenewedAt"] is not None
    lines = {line.split()[0]: line for line in table.splitlines()[1:] if line.strip()}
    assert lines["renewed"].split()[1] == shown["lastRenewedAt"]
    assert lines["certificates"].split(None, 1)[1] == ", ".join(serials)
    assert shown["publicKeySha256"] in lines["key"]


def test_a_token_in_the_wrong_place_and_a_url_that_is_not_the_api_get_a_hint(
    cli: Cli, tmp_path: Path
) -> None:
    assert cli.runtime.admin_key
    # When the API key is passed as a join token, a join token as the API key, and a URL with a path
    key_as_token = cli.run("join", "--token", cli.runtime.admin_key, "--dir", str(tmp_path / "m"))
    token = cli.new_token(cli.new_pool())
    token_as_key = cli.run("pools", "list", env={"JOINPLANE_API_KEY": token})
    wrong_url = cli.run("pools", "list", env={"JOINPLANE_URL": cli.runtime.url + "/v1"})

    # Then each says what is wrong and what to use instead, changing nothing
    assert key_as_token.code == 2
    assert "the join token is an API key (jpk_...), not a join token" in key_as_token.err
    assert not (tmp_path / "m").exists()
    assert token_as_key.code == 2
    assert "--api-key is a join token (jpt_...), not an API key" in token_as_key.err
    assert wrong_url.code == 1
    assert "answered 404 for POST /api/compute/pools/list, a route every Joinplane API has" in wrong_url.err
    assert f"is {cli.runtime.url}/v1 (from JOINPLANE_URL) the API's base URL" in wrong_url.err


def test_settings_come_from_the_config_files_profile_below_options_and_variables(
    cli: Cli, tmp_path: Path
) -> None:
    assert cli.runtime.admin_key
    # Given a config file whose default profile points nowhere and whose `dev` profile is the runtime
    config = tmp_path / "config.toml"
    config.write_text(
        '[default]\nurl = "http://127.0.0.1:9"\n\n'
        f'[dev]\nurl = "{cli.runtime.url}"\napi-key = "{cli.runtime.admin_key}"\ntenant = "dev"\n'
    )
    os.chmod(config, 0o600)
    env = {**UNSET, "JOINPLANE_CONFIG": str(config)}

    # When commands run with no option or variable but the profile
    by_profile = cli.run("pools", "list", "--profile", "dev", "-o", "json", env=env)
    by_variable = cli.run("pools", "list", "-o", "json", env={**env, "JOINPLANE_PROFILE": "dev"})
    default = cli.run("pools", "list", env={**env, "JOINPLANE_API_KEY": cli.runtime.admin_key})
    overridden = cli.run(
        "pools", "list", "--profile", "dev", env={**env, "JOINPLANE_URL": "http://127.0.0.1:9"}
    )
    missing = cli.run("pools", "list", "--profile", "prod", env=env)

    # Then the profile is used, the environment and the options win over it, and a typo is an error
    assert by_profile.code == 0, by_profile.err
    assert by_variable.code == 0, by_variable.err
    assert default.code == 7 and "127.0.0.1:9" in default.err
    assert overridden.code == 7
    assert (
        missing.code == 2
        and f"config file {config} has no profile 'prod' (profiles: default, dev)" in missing.err
    )

    # And a key the file does not know, or a readable file holding an API key, is said
    config.write_text(config.read_text() + 'colour = "blue"\n')
    unknown = cli.run("pools", "list", "--profile", "dev", env=env)
    assert unknown.code == 2 and "has an unknown key 'colour'" in unknown.err
    config.write_text(config.read_text().replace('colour = "blue"\n', ""))
    os.chmod(config, 0o644)
    readable = cli.run("pools", "list", "--profile", "dev", env=env)
    assert readable.code == 0 and "other users can read it (chmod 600" in readable.err


def test_the_queue_of_every_pool_the_key_sees_and_a_request_decided_without_its_pool(
    cli: Cli, tmp_path: Path
) -> None:
    # Given two pools, each with a deferred join
    pools = [cli.new_pool(), cli.new_pool()]
    requests = []
    for index, pool in enumerate(pools):
        token = cli.new_token(pool, "--require-approval")
        deferred = cli.run("join", "--token", token, "--dir", str(tmp_path / f"m{index}"), "-o", "json")
        assert deferred.code == 3, deferred.err
        requests.append(json.loads(deferred.out)["requestId"])

    # When the operator lists the queue without a pool, and looks at and approves one by its id alone
    queue = cli.ok("requests", "list", "--all", "-o", "json").json()["requests"]
    table = cli.ok("requests", "list", "--all").out
    shown = cli.ok("requests", "get", requests[0], "-o", "json").json()
    said = cli.ok("requests", "get", requests[0]).out
    approved = cli.ok("requests", "approve", requests[0], "--ttl", "10m", "-o", "json").json()
    rejected = cli.ok("requests", "reject", requests[1], "--reason", "not ours").out

    # Then both pools' requests were listed, with their pool, and each decision landed in its pool
    assert {r["requestId"]: r["poolId"] for r in queue if r["requestId"] in requests} == dict(
        zip(requests, pools, strict=True)
    )
    assert "POOL" in table.splitlines()[0]
    assert (shown["requestId"], shown["poolId"], shown["state"]) == (requests[0], pools[0], "pending")
    # And the request's own page gives each reason in words, not only its code
    assert "deferred because  approval_required (this join token requires an operator's approval)" in said
    assert (approved["state"], approved["poolId"]) == ("approved", pools[0])
    assert f"Rejected {requests[1]}" in rejected and pools[1] in rejected
