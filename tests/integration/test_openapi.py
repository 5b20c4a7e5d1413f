from joinplane_local import openapi
from tests.support import ROOT


def test_every_template_route_is_documented() -> None:
    assert set(openapi.routes()) <= set(openapi.REQUESTS)


def test_the_committed_document_is_current() -> None:
    # Regenerate with: .venv/bin/python -m joinplane_local.openapi > shared/openapi.json
    assert (ROOT / "shared" / "openapi.json").read_text() == openapi.render()


def test_the_document_is_valid_openapi() -> None:
    from openapi_spec_validator import validate

    validate(openapi.document())
