"""`joinplane join --aws-iam --token-id` against the local runtime: a machine with AWS credentials in
its environment joins with no token secret anywhere, the runtime forwarding its signed
GetCallerIdentity to the embedded STS (docs/aws.md); and without botocore, the option says what
to install."""

from __future__ import annotations

import http.server
import json
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from joinplane import errors, join_wire
from joinplane_cli import main, skew
from joinplane_local.runtime import Runtime
from tests.support import serving
from tests.support.aws_iam import role_credentials
from tests.support.runtime import Cli

ACCOUNT = "123456789012"
INSTANCE = "i-0abcdef0123456789"


def _machine_env(runtime: Runtime, role: str, account: str = ACCOUNT) -> dict[str, str]:
    """What a machine of `role` has: its role's credentials, from the environment only."""
    assert runtime.endpoint_url is not None
    given = role_credentials(runtime.endpoint_url, f"arn:aws:iam::{account}:role/{role}", INSTANCE)
    return {
        "AWS_ACCESS_KEY_ID": given.access_key,
        "AWS_SECRET_ACCESS_KEY": given.secret_key,
        "AWS_SESSION_TOKEN": given.token,
        "AWS_REGION": "eu-west-1",
        "AWS_CONFIG_FILE": "/nonexistent/aws/config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws/credentials",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def _api(runtime: Runtime, operation: str, body: dict[str, Any]) -> Any:
    """An operator call over HTTP, without a CLI process of its own."""
    request = urllib.request.Request(
        f"{runtime.url}/api/compute/{operation}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {runtime.admin_key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


@pytest.mark.e2e
def test_a_machine_with_aws_credentials_joins_with_no_secret(
    cli: Cli, runtime: Runtime, tmp_path: Path
) -> None:
    # Given a pool and a token admitting the account's gpu-node roles, made with the CLI
    pool = f"p-{uuid.uuid4().hex[:10]}"
    _api(
        runtime,
        "pools/create",
        {"tenantId": "dev", "poolId": pool, "siteId": "site-cli", "name": pool, "workspaceId": pool},
    )
    created = cli.ok(
        "tokens", "create", "--pool", pool, "--max-uses", "2", "--aws-account", ACCOUNT,
        "--aws-arn", f"arn:aws:sts::{ACCOUNT}:assumed-role/gpu-node-*/*", "-o", "json",
    ).json()  # fmt: skip
    assert created["attestation"]["aws"]["accounts"] == [ACCOUNT]
    token_id = created["tokenId"]
    # When a gpu-node machine joins by its id, with its AWS credentials and no secret
    machine = tmp_path / "gpu"
    joined = cli.run(
        "join", "--aws-iam", "--token-id", token_id, "--dir", str(machine), "-o", "json",
        env=_machine_env(runtime, "gpu-node-a"),
    )  # fmt: skip
    # Then it is admitted, and the machine shows who it is in AWS
    assert joined.code == 0, joined.err + joined.out
    machine_id = joined.json()["machineId"]
    shown = cli.ok("machines", "get", machine_id).out
    assert f"arn:aws:sts::{ACCOUNT}:assumed-role/gpu-node-a/{INSTANCE} (instance {INSTANCE})" in shown
    # And no token secret was written anywhere on the machine
    assert not any("jpt_" in path.read_text(errors="replace") for path in machine.iterdir() if path.is_file())


def test_a_stale_binding_is_signed_again_once_on_the_servers_clock(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given AWS credentials in the environment, and a server ten minutes ahead of this machine
    # that refuses the first signed request as stale (then denies, to end the join)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_REGION": "eu-west-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    ahead = int(time.time() * 1000) + 600_000
    bodies: list[dict[str, Any]] = []

    class Server(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            if len(bodies) == 1:
                error = errors.Unauthenticated(
                    "stale", reason=errors.AWS_REQUEST_STALE, metadata={"serverTime": str(ahead)}
                )
            else:
                error = errors.PermissionDenied("denied", reason=errors.JOIN_DENIED)
            answer = join_wire.render_error(error)
            self.send_response(answer["statusCode"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"].encode())

        def log_message(self, *args: Any) -> None:
            pass

    skew.forget()
    try:
        with serving(Server) as url:
            # When the machine joins with --aws-iam
            code = main.main(
                ["join", "--aws-iam", "--token-id", "jtok_" + "0" * 26, "--url", url, "--dir", str(tmp_path)]
            )
    finally:
        skew.forget()
    # Then it signed a new request once, bound to the server's time, and went on to the answer
    assert code == 6, capsys.readouterr().err
    times = [int(b["awsIam"]["headers"]["X-Joinplane-Join-Binding"].split(",")[0][2:]) for b in bodies]
    assert len(times) == 2 and times[1] >= ahead > times[0]
    assert bodies[0]["awsIam"]["headers"]["Host"] == "sts.eu-west-1.amazonaws.com"


def test_without_botocore_aws_iam_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given a machine where botocore is not installed
    for name in [name for name in sys.modules if name == "botocore" or name.startswith("botocore.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "botocore", None)
    # When it joins with --aws-iam
    code = main.main(
        [
            "join",
            "--aws-iam",
            "--token-id",
            "jtok_" + "0" * 26,
            "--url",
            "http://127.0.0.1:9",
            "--dir",
            str(tmp_path),
        ]
    )
    # Then it stops with a usage error saying what to install, having sent nothing
    assert code == 2
    assert "pip install 'joinplane-cli[aws]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--aws-iam"], "--token-id"),
        (["--aws-iam", "--token-id", "jtok_x", "--token", "jpt_x"], "no secret"),
        (["--aws-iam", "--token-id", "jpt_x"], "jtok_"),
        (["--token-id", "jtok_x", "--token", "jpt_x"], "add --aws-iam"),
    ],
)
def test_aws_iam_options_that_do_not_fit_are_usage_errors(
    arguments: list[str], said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.delenv("JOINPLANE_TOKEN_ID", raising=False)
    monkeypatch.delenv("JOINPLANE_TOKEN", raising=False)
    code = main.main(["join", *arguments, "--url", "http://127.0.0.1:9", "--dir", str(tmp_path)])
    assert code == 2
    assert said in capsys.readouterr().err


def test_aws_iam_sends_its_signed_request_only_over_https_or_to_this_machine(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # When a machine would join with --aws-iam over plain http to another host
    arguments = ["join", "--aws-iam", "--token-id", "jtok_" + "0" * 26, "--dir", str(tmp_path)]
    code = main.main([*arguments, "--url", "http://192.0.2.1:9"])
    # Then it stops with a usage error naming https, having sent nothing
    assert code == 2
    assert "use an https:// --url" in capsys.readouterr().err
