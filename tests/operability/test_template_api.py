"""The HTTP API as an operator sees it, checked on template.yaml: an access log line per request in
JSON, kept like every log, and a stage-wide throttle so a flood is answered 429 by API Gateway
before any function runs."""

from __future__ import annotations

import json
import re
from typing import Any

from joinplane import routes
from joinplane.routes import ROUTES
from joinplane_local.template import ROOT, load

TEMPLATE = load()
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
API = RESOURCES["HttpApi"]["Properties"]
OPENAPI = ROOT / "shared" / "openapi.json"
THROTTLE_PARAMETERS = {"JoinRateLimit", "JoinBurstLimit", "ClusterJoinRateLimit", "ClusterJoinBurstLimit"}


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


def test_the_routes_anyone_can_call_have_stricter_throttles_of_their_own() -> None:
    # Given the routes no API key guards (a token or cluster key is checked only by the function)
    open_routes = {f"{r.method} {r.path}" for r in ROUTES if r.auth != "api-key"}
    settings = API["RouteSettings"]
    # Then each has its own bucket, and nothing else does
    assert set(settings) == open_routes
    parameters = TEMPLATE["Parameters"]
    for key, throttle in settings.items():
        rate, burst = throttle["ThrottlingRateLimit"]["Ref"], throttle["ThrottlingBurstLimit"]["Ref"]
        assert {rate, burst} <= {
            "JoinRateLimit",
            "JoinBurstLimit",
            "ClusterJoinRateLimit",
            "ClusterJoinBurstLimit",
        }
        # And stricter by default than the stage's, which all routes share
        assert parameters[rate]["Default"] < parameters["ApiRateLimit"]["Default"], key
        assert parameters[burst]["Default"] < parameters["ApiBurstLimit"]["Default"], key
        assert parameters[rate]["MinValue"] >= 1 and parameters[burst]["MinValue"] >= 1
    assert settings["POST /machines/join"]["ThrottlingRateLimit"] == {"Ref": "JoinRateLimit"}
    assert settings["POST /cluster/accept-join"]["ThrottlingRateLimit"] == {"Ref": "ClusterJoinRateLimit"}


def test_every_throttled_route_key_is_an_event_of_the_api() -> None:
    # A route key the stage cannot find fails the deployment ("Unable to find Route by key"): each
    # must be an HttpApi event, so SAM writes it into the API's own body, created before the stage.
    events = {
        f"{e['Properties']['Method']} {e['Properties']['Path']}"
        for resource in RESOURCES.values()
        if resource["Type"] == "AWS::Serverless::Function"
        for e in resource["Properties"].get("Events", {}).values()
        if e["Type"] == "HttpApi" and e["Properties"].get("ApiId") == {"Ref": "HttpApi"}
    }
    assert set(API["RouteSettings"]) <= events


def test_every_operation_documents_the_throttles_429() -> None:
    # Given the OpenAPI document clients generate from
    document = json.loads(OPENAPI.read_text())
    for path, item in document["paths"].items():
        for method, operation in item.items():
            # Then each operation says what API Gateway answers over a throttle
            answer = operation["responses"]["429"]
            assert "Too Many Requests" in answer["description"], (method, path)
            assert "ApiRateLimit" in answer["description"], (method, path)
            schema = answer["content"]["application/json"]["schema"]
            refs = [schema.get("$ref")] + [s["$ref"] for s in schema.get("oneOf", [])]
            assert "#/components/schemas/GatewayMessage" in refs, (method, path)
    # And the routes with limits of their own name their parameters (the console's page and files
    # have buckets too, but are not in the document: joinplane.routes.API)
    documented = {f"{r.method} {r.path}" for r in routes.API}
    for key, throttle in API["RouteSettings"].items():
        if key not in documented:
            continue
        method, path = key.split(" ", 1)
        described = document["paths"][path][method.lower()]["responses"]["429"]["description"]
        assert throttle["ThrottlingRateLimit"]["Ref"] in described, key


def test_tracing_is_one_parameter_for_every_function() -> None:
    parameter = TEMPLATE["Parameters"]["Tracing"]
    assert set(parameter["AllowedValues"]) == {"Active", "PassThrough"}
    # Off unless asked for: X-Ray is paid per trace
    assert parameter["Default"] == "PassThrough"
    assert TEMPLATE["Globals"]["Function"]["Tracing"] == {"Ref": "Tracing"}
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::Serverless::Function":
            assert "Tracing" not in resource["Properties"], f"{name} would ignore the parameter"


def test_lambda_log_filter_never_drops_the_metric_lines() -> None:
    # Lambda files a JSON line without "level" (every EMF blob) as INFO: a WARNING threshold
    # would silently drop every metric, and the alarms on them would never fire.
    assert set(TEMPLATE["Parameters"]["LogLevel"]["AllowedValues"]) <= {"TRACE", "DEBUG", "INFO"}
    assert TEMPLATE["Globals"]["Function"]["LoggingConfig"]["LogFormat"] == "JSON"
