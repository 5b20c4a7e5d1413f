"""Without a webhook URL the template's HasWebhook condition is false: the local runtime creates no
rule for the webhook and posts nothing. (A module of its own: the webhook runtime of
test_webhook.py is stopped before this one starts, so the two never share the table.)"""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path

import boto3
import pytest

from joinplane import container
from joinplane_local.__main__ import parse_args, template_parameters
from joinplane_local.runtime import start_runtime
from joinplane_local.template import TEMPLATE
from tests.support import openssl_csr
from tests.support.runtime import Http, local_runtime


def test_without_a_webhook_url_there_is_no_rule_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given `make run` started with the header's secret set but no URL: no template parameter is set
    monkeypatch.delenv("JOINPLANE_WEBHOOK_URL", raising=False)
    args = parse_args(["--webhook-auth-header-value", "Bearer unused"])
    assert template_parameters(args) == {}
    with local_runtime(
        template_path=TEMPLATE, log=io.StringIO(), parameters=template_parameters(args)
    ) as runtime:
        http = Http(runtime)
        pool = f"wh-{uuid.uuid4().hex[:10]}"
        assert (
            http.post(
                "/api/compute/pools/create",
                {"tenantId": "dev", "poolId": pool, "siteId": "dev-site", "name": pool, "workspaceId": "w"},
                http.admin,
            )[0]
            == 200
        )
        _, token = http.post(
            "/api/compute/joinTokens/create",
            {"tenantId": "dev", "poolId": pool, "requireApproval": True},
            http.admin,
        )

        # When a machine is deferred
        status, _ = http.post("/machines/join", {"joinToken": token["token"], "csr": openssl_csr(tmp_path)})
        assert status == 202
        assert runtime.drain(15)

        # Then no API destination runs, and the bus has rules (the audit consumer's) but none for
        # the webhook
        assert runtime.workers.destinations == []
        events = boto3.client("events", endpoint_url=runtime.endpoint_url, region_name="us-east-1")
        rules = events.list_rules(EventBusName=runtime.template.names.ref("EventBus"))["Rules"]
        assert rules
        assert [r["Name"] for r in rules if "Webhook" in r["Name"]] == []
    container.reset(keep_clients=True)


def test_a_webhook_url_without_its_header_value_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the template's rule WebhookNeedsAnAuthHeaderValue (CloudFormation refuses the stack)
    monkeypatch.delenv("JOINPLANE_WEBHOOK_AUTH_HEADER_VALUE", raising=False)
    args = parse_args(["--webhook-url", "http://127.0.0.1:9/hook"])
    environment = dict(os.environ)

    # When the runtime is started with a URL and no header value
    with pytest.raises(ValueError, match="WebhookAuthHeaderValue must be") as refused:
        start_runtime(port=0, template_path=TEMPLATE, seed=False, parameters=template_parameters(args))

    # Then it says why, and left nothing changed (no emulator, no environment)
    assert "WebhookNeedsAnAuthHeaderValue" in str(refused.value)
    assert dict(os.environ) == environment


def test_a_parameter_the_template_does_not_declare_is_refused() -> None:
    with pytest.raises(ValueError, match="the template has no parameter NoSuchParameter"):
        start_runtime(port=0, template_path=TEMPLATE, seed=False, parameters={"NoSuchParameter": "x"})
