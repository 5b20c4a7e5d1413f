"""Pieces of the runtime that need no server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from joinplane_local.api_routes import Route, select_route
from joinplane_local.functions import Functions, module_name
from joinplane_local.runtime import start_runtime
from joinplane_local.schedules import schedule_period
from joinplane_local.stream_poller import lambda_stream_record
from joinplane_local.template import Names, Template, load
from tests.support.runtime import FIXTURE_TEMPLATE


def test_the_most_specific_route_wins() -> None:
    # Given
    routes = [
        Route.create("Api", "ANY", "/a/{proxy+}", "Greedy", None),
        Route.create("Api", "GET", "/a/{x}/c", "Param", None),
        Route.create("Api", "ANY", "/a/b/c", "AnyExact", None),
        Route.create("Api", "GET", "/a/b/c", "GetExact", None),
        Route.create("Api", "ANY", "$default", "Default", None),
    ]

    # When / Then
    def winner(method: str, path: str) -> str | None:
        found = select_route(routes, method, path)
        return found[0].function if found else None

    assert winner("GET", "/a/b/c") == "GetExact"
    assert winner("POST", "/a/b/c") == "AnyExact"
    assert winner("GET", "/a/z/c") == "Param"
    assert winner("GET", "/a/z/d") == "Greedy"
    assert winner("GET", "/elsewhere") == "Default"


def test_schedule_expressions() -> None:
    assert schedule_period("rate(5 minutes)") == 300
    assert schedule_period("rate(1 hour)") == 3600
    assert schedule_period("rate(2 days)") == 172800
    assert schedule_period("cron(0 12 * * ? *)") == 60  # not interpreted: every minute
    assert schedule_period("at(2030-01-01T00:00:00)") is None


def test_a_stream_record_becomes_lambdas_record() -> None:
    # Given: GetRecords as boto3 returns it (binary as bytes)
    raw = {
        "eventID": "e1",
        "eventName": "INSERT",
        "eventVersion": "1.0",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "Keys": {"pk": {"S": "k"}},
            "NewImage": {
                "pk": {"S": "k"},
                "m": {"M": {"b": {"B": b"\x01"}, "l": {"L": [{"BS": [b"\x02"]}]}}},
            },
            "SequenceNumber": "100",
            "SizeBytes": 10,
            "StreamViewType": "NEW_IMAGE",
        },
    }

    # When
    record = lambda_stream_record(raw, "arn:stream", "eu-west-1")

    # Then
    assert record["eventVersion"] == "1.1"
    assert record["awsRegion"] == "eu-west-1"
    assert record["eventSourceARN"] == "arn:stream"
    assert record["dynamodb"]["NewImage"]["m"] == {"M": {"b": {"B": "AQ=="}, "l": {"L": [{"BS": ["Ag=="]}]}}}


def test_each_function_is_imported_under_its_own_module_name() -> None:
    # Given
    functions = Functions(Template(load(FIXTURE_TEMPLATE), Names()), base_dir=FIXTURE_TEMPLATE.parent)
    path_before = list(sys.path)

    # When
    echo, ticker = functions.module("Echo"), functions.module("Ticker")

    # Then: every file is app.py, yet each is its own module, and sys.path is untouched
    assert echo is not ticker
    assert echo.__name__ == module_name("Echo") == "joinplane_fn_Echo"
    assert Path(echo.__file__ or "").parent.name == "echo"
    assert sys.path == path_before
    assert functions.spec("Shapes").timeout_s == 1
    assert functions.spec("Gatekeeper").memory_mb == 256
    functions.unload()


def test_start_runtime_refuses_inconsistent_options() -> None:
    with pytest.raises(ValueError, match="endpoint_url"):
        start_runtime(mode="endpoint")
    with pytest.raises(ValueError, match="aws mode"):
        start_runtime(table_name="t")
    with pytest.raises(ValueError, match="mode"):
        start_runtime(mode="cloud")  # type: ignore[arg-type]
