"""The operators' webhook (template.yaml's PendingRequestWebhookRule → WebhookDestination) in the
local runtime: each new pending join request is POSTed to a local HTTP receiver, through a real
rule on the emulated bus, the template's input transformer, retry policy and dead-letter queue."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from joinplane import container
from joinplane_local.__main__ import banner, parse_args, template_parameters
from joinplane_local.template import TEMPLATE
from tests.support import openssl_csr, wait_until
from tests.support.receiver import Receiver, receiving
from tests.support.runtime import Http, Tee, local_runtime

SECRET = f"Bearer whsec-{uuid.uuid4().hex}"
HOOK_PATH = f"/hooks/T000/{uuid.uuid4().hex}"  # a chat webhook's path is a secret of its own


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


@pytest.fixture(scope="module")
def hooked(receiver: Receiver) -> Iterator[tuple[Http, Tee]]:
    """`make run` with the webhook options set (as `--webhook-url ... ` and the secret's env var)."""
    log = Tee()
    args = parse_args(["--webhook-url", receiver.url + HOOK_PATH, "--webhook-auth-header-value", SECRET])
    with local_runtime(template_path=TEMPLATE, log=log, parameters=template_parameters(args)) as runtime:
        yield Http(runtime), log
    container.reset(keep_clients=True)


@pytest.fixture
def http(hooked: tuple[Http, Tee], receiver: Receiver) -> Http:
    assert hooked[0].runtime.drain(15), "a previous test left deliveries behind"
    receiver.reset()
    return hooked[0]


def new_pool(http: Http) -> str:
    pool = f"wh-{uuid.uuid4().hex[:10]}"
    status, body = http.post(
        "/api/compute/pools/create",
        {"tenantId": "dev", "poolId": pool, "siteId": "dev-site", "name": pool, "workspaceId": "w"},
        http.admin,
    )
    assert status == 200, body
    return pool


def join(http: Http, pool: str, tmp_path: Path, *, require_approval: bool) -> tuple[int, Any]:
    status, token = http.post(
        "/api/compute/joinTokens/create",
        {"tenantId": "dev", "poolId": pool, "requireApproval": require_approval},
        http.admin,
    )
    assert status == 200, token
    return http.post("/machines/join", {"joinToken": token["token"], "csr": openssl_csr(tmp_path, "/CN=wh")})


def deferred_join(http: Http, pool: str, tmp_path: Path) -> str:
    status, body = join(http, pool, tmp_path, require_approval=True)
    assert status == 202, body
    return str(body["joinRequest"]["requestId"])


def test_a_pending_join_request_is_posted_to_the_webhook_once_with_its_secret_header(
    http: Http, receiver: Receiver, tmp_path: Path
) -> None:
    # Given a pool whose token requires approval
    pool = new_pool(http)

    # When a machine joins and is deferred
    request_id = deferred_join(http, pool, tmp_path)

    # Then the receiver gets one POST, as an API destination sends it, naming the pool and request
    (post,) = wait_until(lambda: receiver.received, 15)
    assert http.runtime.drain(15)
    assert len(receiver.received) == 1
    assert (post.method, post.path) == ("POST", HOOK_PATH)
    assert post.headers["authorization"] == SECRET
    assert post.headers["content-type"] == "application/json; charset=utf-8"
    assert post.headers["user-agent"] == "Amazon/EventBridge/ApiDestinations"
    body = post.json()
    assert body["requestId"] == request_id
    assert (body["poolId"], body["tenantId"]) == (pool, "dev")
    assert f"pool {pool} (tenant dev)" in body["text"] and f"join request {request_id}," in body["text"]
    assert body["expiresAt"] and f"expires {body['expiresAt']}." in body["text"]
    # minified, as EventBridge passes a JSON template's result on
    assert post.body.decode() == json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def test_an_admitted_join_posts_nothing(http: Http, receiver: Receiver, tmp_path: Path) -> None:
    # Given a pool whose token admits without approval
    pool = new_pool(http)

    # When a machine joins
    status, body = join(http, pool, tmp_path, require_approval=False)

    # Then it is admitted, and once every event is delivered the receiver has had no request
    assert status == 200, body
    assert http.runtime.drain(15)
    assert receiver.received == []


def test_a_receiver_that_fails_twice_gets_the_request_on_the_third_attempt(
    http: Http, receiver: Receiver, tmp_path: Path
) -> None:
    # Given a receiver that answers 503, then 500, then 200
    receiver.answer_first(503, 500)
    pool = new_pool(http)

    # When a machine is deferred
    request_id = deferred_join(http, pool, tmp_path)

    # Then the same body is sent three times, and delivered on the third
    wait_until(receiver.delivered, 15)
    assert http.runtime.drain(15)
    attempts = receiver.received
    assert [r.answered for r in attempts] == [503, 500, 200]
    assert {r.body for r in attempts} == {attempts[0].body}
    assert attempts[-1].json()["requestId"] == request_id


def test_a_refused_request_is_not_retried_and_goes_to_the_dead_letter_queue(
    http: Http, receiver: Receiver, tmp_path: Path
) -> None:
    # Given a receiver that refuses the request (a 4xx other than 429 is not retried)
    receiver.answer_first(400)
    pool = new_pool(http)

    # When a machine is deferred
    request_id = deferred_join(http, pool, tmp_path)

    # Then one attempt is made, and the event lands in the template's dead-letter queue with
    # EventBridge's attributes saying why
    (destination,) = http.runtime.workers.destinations
    wait_until(lambda: destination.dead_letters, 15)
    assert http.runtime.drain(15)
    assert [r.answered for r in receiver.received] == [400]
    sqs = boto3.client("sqs", endpoint_url=http.runtime.endpoint_url, region_name="us-east-1")
    queue = sqs.get_queue_url(QueueName=http.runtime.template.names.ref("WebhookDeadLetterQueue"))["QueueUrl"]
    (message,) = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["All"], WaitTimeSeconds=1)[
        "Messages"
    ]
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    event = json.loads(message["Body"])
    assert event["detail-type"] == "security.join-request.created"
    assert event["detail"]["requestId"] == request_id
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes["ERROR_CODE"] == "400"
    assert attributes["RETRY_ATTEMPTS"] == "0"
    assert attributes["RULE_ARN"].startswith("arn:aws:events:")
    assert SECRET not in message["Body"] and SECRET not in json.dumps(attributes)


def test_the_secret_and_the_hook_path_never_reach_the_runtime_output(
    http: Http,
    hooked: tuple[Http, Tee],
    receiver: Receiver,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # Given a delivery that fails once (so the retry is logged) and then succeeds
    receiver.answer_first(502)

    # When a machine is deferred, and the banner `make run` prints is drawn
    deferred_join(http, new_pool(http), tmp_path)
    wait_until(receiver.delivered, 15)
    assert http.runtime.drain(15)
    shown = banner(http.runtime)

    # Then the banner names the destination's host, and nothing printed holds the secret or the path
    out, err = capfd.readouterr()
    log = hooked[1].text()
    assert "retry 1 of 10" in log
    assert f"API destination POST {receiver.url}/…" in shown
    for text in (shown, log, out, err, repr(http.runtime)):
        assert SECRET not in text and HOOK_PATH not in text
