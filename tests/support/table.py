"""The test's table as it is: what a test reads to see what a request left behind."""

from __future__ import annotations

from typing import Any

from joinplane import aws
from joinplane.dal import dynamo
from joinplane.settings import settings


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
