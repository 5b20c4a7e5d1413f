"""A cold start's first AWS client: what joinplane.aws spares botocore (see `make bench`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import UnknownServiceError
from botocore.loaders import Loader

from joinplane import aws, container


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A cold container (no session, no client yet), counting botocore's full service listings."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    seen: list[str] = []
    full_listing = Loader.list_available_services

    def counted(self: Loader, type_name: str) -> Any:
        seen.append(type_name)
        return full_listing(self, type_name)

    monkeypatch.setattr(Loader, "list_available_services", counted)
    container.reset()
    yield seen
    container.reset()  # later tests make their clients again, with botocore's own loader


def test_a_first_client_loads_its_model_without_listing_every_service(listings: list[str]) -> None:
    # Given a cold container
    # When its first DynamoDB client is made
    client = aws.client("dynamodb")

    # Then botocore loaded DynamoDB's model without listing its 400-odd data directories
    assert client.meta.service_model.service_name == "dynamodb"
    assert listings == []


def test_an_unknown_service_is_still_refused_with_the_valid_names(listings: list[str]) -> None:
    # Given a cold container
    # When a client is asked for a service botocore does not know
    with pytest.raises(UnknownServiceError) as refused:
        aws.client("no-such-service")

    # Then botocore refuses it as before, naming the services it knows
    assert "dynamodb" in str(refused.value)
    assert listings == ["service-2"]
