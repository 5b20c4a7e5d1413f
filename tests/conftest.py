"""Shared fixtures: one embedded moto server per test session, a fresh table per test created from
template.yaml's own definition, and the clock put back after each test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from joinplane import aws, clock, container
from joinplane.dal import dynamo
from joinplane.settings import settings
from joinplane_local import emulator as local_emulator
from joinplane_local.seed import install_admin_key
from joinplane_local.template import Names, Template, create_resources, load


@pytest.fixture(scope="session")
def emulator() -> Iterator[local_emulator.Emulator]:
    local_emulator.use_fake_credentials()
    running = local_emulator.start()
    os.environ["AWS_ENDPOINT_URL"] = running.endpoint_url
    aws.reset()
    yield running
    running.stop()


@pytest.fixture
def table(emulator: local_emulator.Emulator) -> Iterator[str]:
    suffix = uuid.uuid4().hex[:10]
    names = Names(physical={"Table": f"jp-{suffix}", "EventBus": f"jp-bus-{suffix}"})
    create_resources(Template(load(), names), aws.client)
    os.environ["TABLE_NAME"] = names.physical["Table"]
    os.environ["EVENT_BUS_NAME"] = names.physical["EventBus"]
    os.environ["CA_SECRET_PREFIX"] = f"jp-{suffix}/ca"
    # What a warm container cached belongs to the old table; the clients still reach the same emulator.
    container.reset(keep_clients=True)
    yield names.physical["Table"]
    clock.reset()


@pytest.fixture
def admin_key(table: str) -> str:
    """A platform admin of tenant `acme`."""
    return install_admin_key("acme", None, "test admin")


def all_items() -> list[dict[str, Any]]:
    """Every item in the test's table (a Scan: tests only)."""
    client = aws.client("dynamodb")
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": settings().table_name}
    while True:
        page = client.scan(**kwargs)
        items += [dynamo.deserialize(raw) for raw in page["Items"]]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
