from typing import Any

import pytest

from joinplane import routes
from joinplane.contract import openapi
from tests.support import ROOT


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi.document()


def test_every_route_of_the_table_is_documented_as_the_table_says(document: dict[str, Any]) -> None:
    # (template.yaml is checked against the same table: tests/api/test_route_table.py)
    paths = document["paths"]
    documented = {
        (method.upper(), path, operation["operationId"], str(operation["security"]))
        for path, methods in paths.items()
        for method, operation in methods.items()
    }
    table = {(r.method, r.path, r.operation, str(openapi.SECURITY[r.auth])) for r in routes.API}
    assert documented == table


def test_the_committed_document_is_current() -> None:
    # Regenerate with: .venv/bin/python -m joinplane.contract > shared/openapi.json
    assert (ROOT / "shared" / "openapi.json").read_text() == openapi.render()


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    from openapi_spec_validator import validate

    validate(document)


def test_each_operation_speaks_in_the_words_of_its_row(document: dict[str, Any]) -> None:
    # Given the table's rows, each carrying its summary, description and example
    paths = document["paths"]
    for route in routes.API:
        # When the document describes the route
        operation = paths[route.path][route.method.lower()]
        # Then it says what the row says, and shows the row's example
        assert (operation["summary"], operation["description"]) == (route.summary, route.description)
        if route.method == "GET":
            assert operation["parameters"][0]["example"] == route.example["caId"]
        else:
            assert operation["requestBody"]["content"]["application/json"]["example"] == route.example


def test_a_route_without_words_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a row added to the table with nothing for the document to say
    bare = routes.Route("POST", "/api/compute/pools/destroy", "PoolsFunction", "pools.destroy", "api-key")
    monkeypatch.setattr(openapi, "API", (*routes.API, bare))
    # When the document is generated, Then it names the row that needs words
    with pytest.raises(ValueError, match=r"POST /api/compute/pools/destroy: its row in joinplane.routes"):
        openapi.document()
