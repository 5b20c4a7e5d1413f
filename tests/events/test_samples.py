"""shared/samples: the sample events users build consumers and tests against stay true to the code."""

from __future__ import annotations

import json

import jsonschema
import pytest

from joinplane import events
from tests.support import ROOT
from tests.support.events import SCHEMAS

SAMPLES = ROOT / "shared" / "samples"
EVENTBRIDGE = sorted(SAMPLES.glob("eventbridge.*.json"))


@pytest.mark.parametrize("path", EVENTBRIDGE, ids=lambda p: p.name)
def test_each_sample_event_is_what_the_publisher_makes_of_its_stream_record(path) -> None:
    sample = json.loads(path.read_text())
    jsonschema.validate(sample["detail"], SCHEMAS[sample["detail-type"]])
    stream = json.loads((SAMPLES / path.name.replace("eventbridge.", "stream-record.")).read_text())
    derived = events.from_stream_record(stream["Records"][0])
    assert derived is not None
    assert (derived.detail_type, derived.detail) == (sample["detail-type"], sample["detail"])


def test_every_detail_type_has_a_sample() -> None:
    assert {json.loads(p.read_text())["detail-type"] for p in EVENTBRIDGE} == set(SCHEMAS)


def test_the_http_api_sample_is_served_by_its_function(admin_key: str) -> None:
    from tests.support import LambdaContext, load_function

    sample = json.loads((SAMPLES / "http-api.joinRequests-approve.json").read_text())
    # The sample's key is not in the table: the handler answers, in the operator envelope
    sample["requestContext"]["authorizer"]["lambda"]["tenantId"] = "acme"
    result = load_function("join_requests").lambda_handler(sample, LambdaContext())
    assert result["statusCode"] == 404 and json.loads(result["body"])["error"]["code"] == "NOT_FOUND"
