"""joinplane.routes is the one route table: template.yaml's HttpApi events must be exactly it (sam
deploys from the YAML, so it is checked rather than generated), and every function binds every
route the table gives it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from joinplane import routes
from joinplane.contract.template import add_events, event_lines, event_name
from joinplane.http import Router
from joinplane_local.template import TEMPLATE, load
from tests.support import ROOT, function_specs, load_function


def template_routes(path: Path = TEMPLATE) -> set[tuple[str, str, str, bool]]:
    """(method, path, logical id, behind the API key authorizer) of every HttpApi event."""
    found = set()
    for logical_id, resource in load(path)["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event in (resource["Properties"].get("Events") or {}).values():
            if event["Type"] == "HttpApi":
                props = event["Properties"]
                authorizer = (props.get("Auth") or {}).get("Authorizer")
                found.add((props["Method"], props["Path"], logical_id, authorizer == "ApiKeyAuthorizer"))
    return found


def test_the_template_routes_are_exactly_the_table() -> None:
    table = {(r.method, r.path, r.function, r.auth == "api-key") for r in routes.ROUTES}
    template = template_routes()
    # A route added to the table fails here until `make routes` writes its event (or it is pasted
    # from this message under its function's Events).
    missing = [
        r for r in routes.ROUTES if (r.method, r.path, r.function, r.auth == "api-key") not in template
    ]
    paste = "".join(f"  in {r.function}:\n{''.join(event_lines(r, event_name(r)))}" for r in missing)
    assert template == table, f"template.yaml lacks:\n{paste}and has beyond the table: {template - table}"


def _without_event(text: str, path: str) -> str:
    """The template without the event of `path` (its name, Type and Properties lines)."""
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if f"Path: {path}" in line and "HttpApi" in line)
    return "".join(lines[: at - 2] + lines[at + 1 :])


def test_the_generator_writes_back_the_events_the_template_lacks(tmp_path: Path) -> None:
    # Given the template without two of the table's events: an operator route's, a public one's
    text = _without_event(
        _without_event(TEMPLATE.read_text(), "/api/compute/pools/archive"), '"/bundle/{caId}"'
    )

    # When the generator writes the table's events into it
    written, added, problems = add_events(text)

    # Then each is back under its function, named as before, in the template's own one-line form
    assert added == [
        "PoolsFunction.Archive: POST /api/compute/pools/archive",
        "CertificateAuthoritiesFunction.Bundle: GET /bundle/{caId}",
    ]
    assert problems == []
    assert 'Properties: { ApiId: !Ref HttpApi, Method: GET, Path: "/bundle/{caId}" }' in written
    (tmp_path / "template.yaml").write_text(written)
    table = {(r.method, r.path, r.function, r.auth == "api-key") for r in routes.ROUTES}
    assert template_routes(tmp_path / "template.yaml") == table
    # And a template that has every event is left as it is
    assert add_events(TEMPLATE.read_text()) == (TEMPLATE.read_text(), [], [])


def test_a_new_row_gets_its_event_and_a_stray_event_is_named_not_removed(tmp_path: Path) -> None:
    # Given a table with a new route, and without one the template has
    new = routes.Route("POST", "/api/compute/pools/destroy", "PoolsFunction", "pools.destroy", "api-key")
    table = (*(r for r in routes.ROUTES if r.operation != "pools.archive"), new)

    # When the generator writes the table's events into the template
    written, added, problems = add_events((ROOT / "template.yaml").read_text(), table)

    # Then the new route's event is under its function, behind the authorizer, named after it
    assert added == ["PoolsFunction.Destroy: POST /api/compute/pools/destroy"]
    (tmp_path / "template.yaml").write_text(written)
    events = load(tmp_path / "template.yaml")["Resources"]["PoolsFunction"]["Properties"]["Events"]
    assert events["Destroy"]["Properties"]["Path"] == "/api/compute/pools/destroy"
    assert events["Destroy"]["Properties"]["Auth"] == {"Authorizer": "ApiKeyAuthorizer"}
    # And the event the table lacks stays, named for a person to remove
    assert "Archive" in events
    assert problems == [
        "POST /api/compute/pools/archive: under PoolsFunction in the template, not in the table"
    ]


def test_routes_and_operations_are_unique() -> None:
    assert len({(r.method, r.path) for r in routes.ROUTES}) == len(routes.ROUTES)
    assert len({r.operation for r in routes.ROUTES}) == len(routes.ROUTES)


@pytest.mark.parametrize("function", sorted({r.function for r in routes.ROUTES}))
def test_every_function_binds_every_route_the_table_gives_it(function: str) -> None:
    router = load_function(function).routes
    assert isinstance(router, Router)
    assert router.function == function
    assert router.unbound() == []


@pytest.mark.parametrize("route", [r for r in routes.ROUTES if r.response], ids=lambda r: r.operation)
def test_each_handler_is_typed_to_return_the_view_the_table_names(route: routes.Route) -> None:
    # mypy holds the handler to its annotation and the domain function to the same view; this holds
    # the annotation to the table, from which the OpenAPI response schema is generated.
    assert route.response is not None
    handler = load_function(route.function).routes.handler(route.operation)
    view = route.response.removeprefix("joinplane.views:")
    assert handler.__annotations__["return"] == f"views.{view}"


def test_every_http_function_has_a_router_from_the_table() -> None:
    # A handler file that answers HTTP without the table's router would escape the check above.
    with_routes = {r.function for r in routes.ROUTES}
    for logical_id, spec in function_specs().items():
        if logical_id in with_routes:
            # Unwrapped: the tests run each handler as its function's role (joinplane_local.iam).
            assert (
                inspect.unwrap(getattr(load_function(logical_id), spec.handler_attr))
                == load_function(logical_id).routes.handle
            )


def test_a_route_the_table_lacks_is_refused_when_the_handler_binds_it() -> None:
    router = Router("PoolsFunction", lambda error: {"error": error.code})
    with pytest.raises(LookupError):
        router.operation("pools.destroy")
    with pytest.raises(LookupError):
        router.operation("joinTokens.create")  # the table's, but another function's
    with pytest.raises(LookupError):
        Router("NoSuchFunction", lambda error: {})


def test_an_unbound_route_is_reported() -> None:
    router = Router("PoolsFunction", lambda error: {"error": error.code})

    @router.operation("pools.get")
    def get(request: object) -> dict[str, str]:
        return {}

    # (every other route the table gives the function, in the table's order)
    others = [r.operation for r in routes.of_function("PoolsFunction") if r.operation != "pools.get"]
    assert "pools.create" in others
    assert router.unbound() == others


def test_no_function_imports_the_views_or_pydantic_schemas_at_cold_start() -> None:
    # joinplane.views is for the type checker and the OpenAPI generator (joinplane.contract): the
    # domain imports the one only under TYPE_CHECKING and never the other, so neither costs a
    # function's cold start anything.
    probe = (
        "import sys; sys.path[:0] = sys.argv[1:3]; import app; "
        "print(sorted(m for m in sys.modules if m in ('joinplane.views', 'joinplane_local') "
        "or m.startswith('joinplane.contract')))"
    )
    for spec in function_specs().values():
        found = subprocess.run(
            [sys.executable, "-c", probe, str(spec.code_dir), str(ROOT / "layers" / "domain")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert found.strip() == "[]", spec.logical_id
