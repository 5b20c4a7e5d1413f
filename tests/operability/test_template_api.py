"""The HTTP API as an operator sees it, checked on template.yaml: an access log line per request in
JSON, kept like every log, and a stage-wide throttle so a flood is answered 429 by API Gateway
before any function runs."""

from __future__ import annotations

import json
import re
from typing import Any

from joinplane_local.template import load

TEMPLATE = load()
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
API = RESOURCES["HttpApi"]["Properties"]


def test_every_request_leaves_one_json_access_log_line() -> None:
    # Given the access log settings of the HTTP API
    settings = API["AccessLogSettings"]
    # When API Gateway fills in each $context variable (here with a sample value)
    line = re.sub(r"\$context\.[A-Za-z.]+", "x", settings["Format"])
    # Then the line is one JSON object naming the request id, route and status
    entry = json.loads(line)
    named = {"requestId", "routeKey", "status", "latencyMs", "integrationError", "authorizerError"}
    assert named <= set(entry)
    # And it goes to a log group of this stack, kept for LogRetentionDays
    destination = settings["DestinationArn"]
    assert destination == {"Fn::GetAtt": ["ApiAccessLogGroup", "Arn"]}
    group = RESOURCES["ApiAccessLogGroup"]
    assert group["Type"] == "AWS::Logs::LogGroup"
    assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}


def test_the_stage_is_throttled_by_parameters() -> None:
    throttle = API["DefaultRouteSettings"]
    assert throttle == {
        "ThrottlingBurstLimit": {"Ref": "ApiBurstLimit"},
        "ThrottlingRateLimit": {"Ref": "ApiRateLimit"},
    }
    for name in ("ApiBurstLimit", "ApiRateLimit"):
        parameter = TEMPLATE["Parameters"][name]
        assert parameter["Type"] == "Number" and parameter["MinValue"] >= 1 and parameter["Default"] >= 1
