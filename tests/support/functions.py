"""The project's Lambda functions as the tests load them: found through the route table and the
template, imported from functions/ as Lambda would import them."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from joinplane import routes
from joinplane_local import iam
from joinplane_local.functions import FunctionSpec, specs_from_template
from joinplane_local.template import Template, load

ROOT = Path(__file__).resolve().parents[2]
_loaded: dict[str, ModuleType] = {}


@functools.cache
def function_specs() -> dict[str, FunctionSpec]:
    """The template's functions by logical id: folder (CodeUri), handler module and attribute."""
    return specs_from_template(Template(load()))


def load_function(name: str) -> ModuleType:
    """A function's handler module, by logical id (`PoolsFunction`) or by its folder under
    functions/ (`pools`), imported under a unique module name (every handler file is app.py)."""
    specs = function_specs()
    spec = specs.get(name) or next(s for s in specs.values() if s.code_dir == ROOT / "functions" / name)
    if spec.logical_id not in _loaded:
        found = importlib.util.spec_from_file_location(f"fn_{spec.code_dir.name}", spec.module_file)
        assert found and found.loader
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        # Run as the function's role: its calls are checked against its policy (joinplane_local.iam).
        setattr(module, spec.handler_attr, iam.acting(spec.logical_id, getattr(module, spec.handler_attr)))
        _loaded[spec.logical_id] = module
    return _loaded[spec.logical_id]


def function_of(path: str, method: str = "POST") -> str:
    """The logical id of the function the route table gives `method path`. A path the table
    lacks goes to the function serving its siblings (`pools/destroy`: the pools function), to see
    what a function answers for a route it does not serve."""
    try:
        return routes.at(method, path).function
    except LookupError:
        parent = path.rsplit("/", 1)[0] + "/"
        return next(route.function for route in routes.ROUTES if route.path.startswith(parent))


def route_handler(path: str, method: str = "POST") -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """The Lambda handler of the function that serves `method path`."""
    function = function_specs()[function_of(path, method)]
    handler: Callable[[dict[str, Any], Any], dict[str, Any]] = getattr(
        load_function(function.logical_id), function.handler_attr
    )
    return handler
