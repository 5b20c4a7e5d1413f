"""The runtime creates the template's table and bus on an emulator that already holds many: the
test session's own emulator holds a bus per test, more than one page of any listing."""

from __future__ import annotations

import uuid

from joinplane import aws
from joinplane_local.template import Names, Template, create_resources, load


def test_resources_are_created_once_on_an_emulator_with_more_than_a_page_of_them(table: str) -> None:
    # Given an emulator with more event buses than one page of a listing (moto's is 50)
    events = aws.client("events")
    for _ in range(60):
        events.create_event_bus(Name=f"other-{uuid.uuid4().hex[:12]}")
    suffix = uuid.uuid4().hex[:10]
    names = Names(physical={"Table": f"jp-{suffix}", "EventBus": f"jp-bus-{suffix}"})
    # When the template's resources are created, and created again (a second runtime on it)
    create_resources(Template(load(), names), aws.client)
    create_resources(Template(load(), names), aws.client)
    # Then both exist, once
    assert events.describe_event_bus(Name=f"jp-bus-{suffix}")["Name"] == f"jp-bus-{suffix}"
    assert aws.client("dynamodb").describe_table(TableName=f"jp-{suffix}")["Table"]["TableStatus"] == "ACTIVE"
