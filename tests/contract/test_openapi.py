from joinplane import routes
from joinplane_local import openapi
from tests.support import ROOT


def test_every_route_of_the_table_is_documented_as_the_table_says() -> None:
    # (template.yaml is checked against the same table: tests/api/test_route_table.py)
    paths = openapi.document()["paths"]
    documented = {
        (method.upper(), path, operation["operationId"], str(operation["security"]))
        for path, methods in paths.items()
        for method, operation in methods.items()
    }
    table = {(r.method, r.path, r.operation, str(openapi.SECURITY[r.auth])) for r in routes.API}
    assert documented == table


def test_the_committed_document_is_current() -> None:
    # Regenerate with: .venv/bin/python -m joinplane_local.openapi > shared/openapi.json
    assert (ROOT / "shared" / "openapi.json").read_text() == openapi.render()


def test_the_document_is_valid_openapi() -> None:
    from openapi_spec_validator import validate

    validate(openapi.document())
