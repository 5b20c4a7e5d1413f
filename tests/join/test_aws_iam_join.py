"""The AWS IAM join method (docs/aws.md): a machine joins with a GetCallerIdentity request signed by
its AWS credentials, through a token named by its id. The emulator's STS answers for the
credentials it handed out (it checks no signature: the checks here are Joinplane's own)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from joinplane import aws_rules, container
from joinplane.dal import dynamo
from joinplane.dal.tokens import token_key
from local.joinplane_local.emulator import Emulator
from tests.support import call, join, recording, serving
from tests.support.aws_iam import role_credentials, signed_request, spki_sha256

ACCOUNT, OTHER_ACCOUNT = "123456789012", "111122223333"
INSTANCE = "i-0123456789abcdef0"
GPU_ROLES = f"arn:aws:sts::{ACCOUNT}:assumed-role/gpu-node-*/*"


@pytest.fixture
def sts(emulator: Emulator, table: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The join forwards to the emulator's STS, as the local runtime configures it."""
    monkeypatch.setenv("STS_ENDPOINT_URL", emulator.endpoint_url)
    container.reset(keep_clients=True)
    yield emulator.endpoint_url
    monkeypatch.delenv("STS_ENDPOINT_URL")
    container.reset(keep_clients=True)


@pytest.fixture
def aws_token(make_token: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    def make(accounts: tuple[str, ...] = (), arns: tuple[str, ...] = ()) -> dict[str, Any]:
        return make_token(maxUses=5, attestation={"aws": {"accounts": list(accounts), "arns": list(arns)}})

    return make


def _credentials(sts: str, role: str = "gpu-node-a", account: str = ACCOUNT, session: str = INSTANCE) -> Any:
    return role_credentials(sts, f"arn:aws:iam::{account}:role/{role}", session)


def _body(token: dict[str, Any], machine: Any, signed: dict[str, Any]) -> dict[str, Any]:
    return {"csr": machine.csr, "hostname": "gpu-7", "awsIam": {"tokenId": token["tokenId"], **signed}}


def _uses(token: dict[str, Any]) -> int:
    stored = dynamo.get(*token_key(token["tokenId"]))
    assert stored is not None
    return int(stored["usesRemaining"])


def _nothing_stored(token: dict[str, Any], machine: Any) -> None:
    assert _uses(token) == token["usesRemaining"]
    assert dynamo.get(f"JOINID#acme#{spki_sha256(machine.csr)}", "JOINID") is None


def test_a_machine_of_an_admitted_account_joins_with_no_secret_and_shows_who_it_is(
    sts: str, aws_token: Callable[..., dict[str, Any]], machine_factory: Any, admin_key: str
) -> None:
    # Given a token admitting account 123456789012, and an EC2 instance profile's credentials there
    token, machine = aws_token(accounts=(ACCOUNT,)), machine_factory()
    signed = signed_request(_credentials(sts), spki=spki_sha256(machine.csr))
    # When the machine joins with its signed GetCallerIdentity and its key's proof, and no secret
    admitted = join(_body(token, machine, signed), signed_by=machine.key)
    # Then it is admitted, and its record shows the caller's account, ARN and instance
    assert admitted.status == 200, admitted.body
    got = call(
        "/api/compute/machines/get", {"tenantId": "acme", "machineId": admitted.body["machineId"]}, admin_key
    )
    assert got.body["aws"] == {
        "account": ACCOUNT,
        "arn": f"arn:aws:sts::{ACCOUNT}:assumed-role/gpu-node-a/{INSTANCE}",
        "userId": got.body["aws"]["userId"],
        "instanceId": INSTANCE,
    }
    assert got.body["aws"]["userId"].endswith(f":{INSTANCE}")
    # And the token shows its rules
    listed = call("/api/compute/joinTokens/list", {"tenantId": "acme", "poolId": "gpu"}, admin_key)
    assert listed.body["joinTokens"][0]["attestation"]["aws"] == {"accounts": [ACCOUNT], "arns": []}


def test_an_arn_pattern_admits_its_roles_and_denies_the_others_storing_nothing(
    sts: str, aws_token: Callable[..., dict[str, Any]], machine_factory: Any
) -> None:
    # Given a token admitting the gpu-node roles of the account, with uses to spare
    token = aws_token(accounts=(ACCOUNT,), arns=(GPU_ROLES,))
    gpu, web = machine_factory(), machine_factory()
    # When a gpu-node role's machine and a web role's machine of the same account join
    admitted = join(
        _body(token, gpu, signed_request(_credentials(sts, "gpu-node-b"), spki=spki_sha256(gpu.csr))),
        signed_by=gpu.key,
    )
    denied = join(
        _body(token, web, signed_request(_credentials(sts, "web-1"), spki=spki_sha256(web.csr))),
        signed_by=web.key,
    )
    # Then the first is admitted, the second denied (7) naming its ARN, and nothing is kept of it
    assert admitted.status == 200, admitted.body
    assert (denied.status, denied.body["code"], denied.reason) == (403, 7, "JOIN_DENIED")
    assert "assumed-role/web-1/" in denied.body["message"]
    assert dynamo.get(f"JOINID#acme#{spki_sha256(web.csr)}", "JOINID") is None


def test_a_signed_request_of_another_caller_key_or_time_or_without_proof_is_refused_storing_nothing(
    sts: str, aws_token: Callable[..., dict[str, Any]], machine_factory: Any
) -> None:
    token = aws_token(accounts=(ACCOUNT,))
    # Given a gpu-node role of another account, When it joins, Then it is denied (7)
    other, machine = _credentials(sts, account=OTHER_ACCOUNT), machine_factory()
    denied = join(
        _body(token, machine, signed_request(other, spki=spki_sha256(machine.csr))), signed_by=machine.key
    )
    assert (denied.status, denied.reason) == (403, "JOIN_DENIED"), denied.body
    _nothing_stored(token, machine)
    # Given a request signed for machine A's key, When B sends it with its own CSR and proof,
    # Then it is refused (16)
    a, b = machine_factory(), machine_factory()
    replayed = join(
        _body(token, b, signed_request(_credentials(sts), spki=spki_sha256(a.csr))), signed_by=b.key
    )
    assert (replayed.status, replayed.reason) == (401, "AWS_BINDING_INVALID"), replayed.body
    _nothing_stored(token, b)
    # Given a request bound to the key 301 seconds ago, When it is sent, Then it is refused with
    # the server's time
    old = int(time.time() * 1000) - 301_000
    signed = signed_request(_credentials(sts), spki=spki_sha256(a.csr), t_ms=old)
    stale = join(_body(token, a, signed), signed_by=a.key)
    assert (stale.status, stale.reason) == (401, "AWS_REQUEST_STALE"), stale.body
    assert int(stale.metadata["serverTime"]) > old
    # Given a fresh request for the key, When it is sent without a Joinplane-Proof, Then it is
    # refused: the binding names a public key, only the proof shows it is held
    unproved = join(_body(token, a, signed_request(_credentials(sts), spki=spki_sha256(a.csr))))
    assert (unproved.status, unproved.reason) == (401, "PROOF_REQUIRED"), unproved.body
    _nothing_stored(token, a)


# Each way a signed request differs from the method's shape, and what the refusal names.
SHAPES = [
    ({"host": "sts.us-east-1.amazonaws.com.evil.example"}, "is not an STS endpoint"),
    ({"host": "joinplane-bucket.s3.amazonaws.com"}, "is not an STS endpoint"),
    ({"host": "sts.eu-west-1.amazonaws.com"}, "signed for the region"),
    ({"body": "Action=GetSessionToken&Version=2011-06-15"}, "Action=GetCallerIdentity"),
    ({"body": "Action=GetCallerIdentity&Version=2011-06-15&Action=AssumeRole"}, "nothing else"),
    ({"service": "iam"}, "not sts"),
    ({"sign_binding": False}, "x-joinplane-join-binding must be signed"),
]
HEADERS = [
    ({"X-Forwarded-Host": "evil.example"}, "is not one a signed GetCallerIdentity carries"),
    ({"host": "sts.amazonaws.com"}, "given twice"),
    ({"X-Joinplane-Join-Binding": "t=1,spki=ab"}, "must be t=<unix ms>"),
]


def test_a_signed_request_of_another_shape_is_refused_before_anything_is_sent(
    aws_token: Callable[..., dict[str, Any]], machine_factory: Any, emulator: Emulator
) -> None:
    # Given no STS configured (the production path, which would send to the allow-listed host itself)
    token, machine = aws_token(accounts=(ACCOUNT,)), machine_factory()
    credentials = _credentials(emulator.endpoint_url)
    changed = [signed_request(credentials, spki=spki_sha256(machine.csr), **change) for change, _ in SHAPES]
    good = signed_request(credentials, spki=spki_sha256(machine.csr))
    changed += [{**good, "headers": {**good["headers"], **extra}} for extra, _ in HEADERS]
    for signed, (_, named) in zip(changed, SHAPES + HEADERS, strict=True):
        # When a request changed one way from what the method accepts is sent
        refused = join(_body(token, machine, signed), signed_by=machine.key)
        # Then it is a 400 naming what is wrong
        assert (refused.status, refused.reason) == (400, "AWS_REQUEST_INVALID"), refused.body
        assert named in refused.body["message"], refused.body
    # And awsIam fields of the wrong type, size or name are refused by the wire, naming the field
    aws = {"tokenId": token["tokenId"], **good}
    for wrong, field in (
        ({**aws, "region": "us-east-1"}, "unknown field awsIam.region"),
        ({**aws, "headers": [["Host", "sts.amazonaws.com"]]}, "awsIam.headers"),
        ({**aws, "headers": {**good["headers"], "X-Amz-Date": "1\r\nX-Evil: 1"}}, "awsIam.headers"),
        ({**aws, "headers": {f"X-{n}": "v" for n in range(17)}}, "awsIam.headers"),
        ({**aws, "body": 7}, "awsIam.body"),
        ({**aws, "tokenId": token["token"]}, "awsIam.tokenId"),
    ):
        refused = join({"csr": machine.csr, "awsIam": wrong}, signed_by=machine.key)
        assert (refused.status, refused.body["code"]) == (400, 3), refused.body
        assert field in refused.body["message"], refused.body
    _nothing_stored(token, machine)


def test_the_token_names_its_method_both_ways_and_its_rules_are_checked(
    sts: str,
    make_token: Callable[..., dict[str, Any]],
    aws_token: Callable[..., dict[str, Any]],
    machine_factory: Any,
    admin_key: str,
) -> None:
    # Given a token with AWS rules and one without
    iam, plain, machine = aws_token(accounts=(ACCOUNT,)), make_token(), machine_factory()
    # When the IAM token's secret is used without a signed request
    by_secret = join({"joinToken": iam["token"], "csr": machine.csr}, signed_by=machine.key)
    # Then it is denied: its secret is no way around its rules
    assert (by_secret.status, by_secret.reason) == (403, "JOIN_DENIED"), by_secret.body
    assert "--aws-iam" in by_secret.body["message"]
    # When the plain token is named by id in an IAM join
    signed = signed_request(_credentials(sts), spki=spki_sha256(machine.csr))
    by_id = join(_body(plain, machine, signed), signed_by=machine.key)
    # Then it is refused as an unknown token is
    assert (by_id.status, by_id.reason) == (401, "JOIN_TOKEN_INVALID"), by_id.body
    # And a secret sent beside awsIam is refused outright
    both = join({**_body(iam, machine, signed), "joinToken": iam["token"]}, signed_by=machine.key)
    assert (both.status, both.body["code"]) == (400, 3), both.body
    _nothing_stored(iam, machine)
    for rules in (
        {},
        {"accounts": ["12345"]},
        {"arns": ["not-an-arn"]},
        {"accounts": [ACCOUNT], "roles": []},
        # a wildcard account: anyone, in any AWS account, naming such a role (with a list, too)
        {"arns": ["arn:aws:sts::*:assumed-role/gpu-node/*"]},
        {"arns": ["arn:aws:iam::*:*"]},
        {"accounts": [ACCOUNT], "arns": ["arn:aws:sts::*:assumed-role/gpu-node/*"]},
    ):
        # Given rules that are empty, malformed or carry an unknown field
        body = {"tenantId": "acme", "poolId": "gpu", "attestation": {"aws": rules}}
        # When a token is created with them, Then it is refused
        made = call("/api/compute/joinTokens/create", body, admin_key)
        assert made.status == 400, (rules, made.body)


def test_the_server_never_contacts_a_host_that_is_not_on_the_list(
    aws_token: Callable[..., dict[str, Any]],
    machine_factory: Any,
    emulator: Emulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a listening server that records every connection, and a request signed for its address
    token, machine = aws_token(accounts=(ACCOUNT,)), machine_factory()
    credentials = _credentials(emulator.endpoint_url)
    with recording() as elsewhere:
        signed = signed_request(credentials, spki=spki_sha256(machine.csr), host=elsewhere.address)
        # When it is sent (the production path: no endpoint configured)
        refused = join(_body(token, machine, signed), signed_by=machine.key)
        # Then it is refused, and the server saw nothing
        assert (refused.status, refused.reason) == (400, "AWS_REQUEST_INVALID"), refused.body

        # Given the configured STS answers with a redirect to that server
        with serving(_redirecting_to(f"http://{elsewhere.address}/")) as redirecting_sts:
            monkeypatch.setenv("STS_ENDPOINT_URL", redirecting_sts)
            container.reset(keep_clients=True)
            allowed = signed_request(credentials, spki=spki_sha256(machine.csr))
            # When a well-formed request is forwarded
            unavailable = join(_body(token, machine, allowed), signed_by=machine.key)
        monkeypatch.delenv("STS_ENDPOINT_URL")
        container.reset(keep_clients=True)
        # Then the redirect is not followed: the join is unavailable, nothing stored
        assert (unavailable.status, unavailable.body["code"]) == (503, 14), unavailable.body
        assert elsewhere.connections == 0

        # Given the configured STS is that server, and the invocation has too little time left to
        # wait for it and still commit
        monkeypatch.setenv("STS_ENDPOINT_URL", f"http://{elsewhere.address}")
        container.reset(keep_clients=True)
        # When a well-formed request is sent
        late = join(_body(token, machine, allowed), signed_by=machine.key, remaining_millis=1_050)
        monkeypatch.delenv("STS_ENDPOINT_URL")
        container.reset(keep_clients=True)
        # Then it is out of time before anything is sent
        assert (late.status, late.reason) == (503, "OUT_OF_TIME"), late.body
        assert elsewhere.connections == 0
    _nothing_stored(token, machine)


def _redirecting_to(location: str) -> type:
    import http.server

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Redirect


@pytest.mark.parametrize(
    ("pattern", "arn", "matches"),
    [
        (GPU_ROLES, f"arn:aws:sts::{ACCOUNT}:assumed-role/gpu-node-a/{INSTANCE}", True),
        (GPU_ROLES, f"arn:aws:sts::{ACCOUNT}:assumed-role/cpu-node-a/{INSTANCE}", False),
        (GPU_ROLES, f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/gpu-node-a/{INSTANCE}", False),
        (f"arn:aws:iam::{ACCOUNT}:user/a*b*c", f"arn:aws:iam::{ACCOUNT}:user/aXbYc", True),
        (f"arn:aws:iam::{ACCOUNT}:user/a*b*c", f"arn:aws:iam::{ACCOUNT}:user/aXbYcd", False),
        (f"arn:aws:iam::{ACCOUNT}:user/ab", f"arn:aws:iam::{ACCOUNT}:user/AB", False),  # case-sensitive
        # many stars against a long ARN a caller chose (an IAM user's path): a regex of `.*`s takes
        # minutes on this; the matcher is linear
        (
            "arn:aws:iam::*:user/" + "a*" * 8 + "c",
            "arn:aws:iam::999988887777:user/" + "a/" * 250 + "b",
            False,
        ),
    ],
)
def test_an_arn_pattern_matches_the_whole_arn_with_stars_for_any_run(
    pattern: str, arn: str, matches: bool
) -> None:
    assert aws_rules.arn_matches(pattern, arn) is matches


def _sts_answering(kind: str) -> type:
    import http.server

    class Sts(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if kind == "garbage":
                self.wfile.write(b"GARBAGE\r\n\r\n")
                return
            if kind == "trickle":  # a byte a second: each read is within a socket timeout
                self.send_response(200)
                self.send_header("Content-Length", "100")
                self.end_headers()
                for _ in range(10):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(1)
                return
            status, code = {"throttled": (400, "Throttling"), "rejected": (403, "SignatureDoesNotMatch")}[
                kind
            ]
            text = f"<ErrorResponse><Error><Code>{code}</Code></Error></ErrorResponse>".encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: Any) -> None:
            pass

    return Sts


@pytest.mark.parametrize(
    ("kind", "status", "reason"),
    [
        # STS's "not now" is the caller's retry (a fleet booting at once is throttled), never a rejection
        ("throttled", 503, None),
        ("rejected", 401, "AWS_IDENTITY_REJECTED"),
        ("garbage", 503, None),  # not HTTP at all
        ("trickle", 503, None),  # an answer that would outlast the invocation
    ],
)
def test_sts_failing_to_answer_is_a_retry_and_only_its_refusal_a_rejection(
    kind: str,
    status: int,
    reason: str | None,
    aws_token: Callable[..., dict[str, Any]],
    machine_factory: Any,
    emulator: Emulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the configured STS answers so
    token, machine = aws_token(accounts=(ACCOUNT,)), machine_factory()
    signed = signed_request(_credentials(emulator.endpoint_url), spki=spki_sha256(machine.csr))
    with serving(_sts_answering(kind)) as url:
        monkeypatch.setenv("STS_ENDPOINT_URL", url)
        container.reset(keep_clients=True)
        # When a well-formed request is forwarded
        started = time.monotonic()
        answered = join(_body(token, machine, signed), signed_by=machine.key)
        took = time.monotonic() - started
    monkeypatch.delenv("STS_ENDPOINT_URL")
    container.reset(keep_clients=True)
    # Then the join answers so, before the trickle would have ended, and nothing is stored
    assert answered.status == status, answered.body
    assert reason is None or answered.reason == reason, answered.body
    assert took < 8, took
    _nothing_stored(token, machine)
