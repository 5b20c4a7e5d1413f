"""The operator API (`/api/compute/...`): each operation generated from its row of the route table.
The request schema is the route's own (strict) request model, the 200 answer its TypedDict view in
`joinplane.views` (the type the domain's view functions return), both named by the row; the words
and the example are the row's too. Errors are the operator envelope, and API Gateway's own
`{"message": ...}` where the gateway answers before a function runs (no `Authorization` header: 401)."""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter

from joinplane.contract.common import JSON, REF, TAGS, Schema, content, operator_errors
from joinplane.contract.validators import REQUEST_PATCHES
from joinplane.routes import Route


def _resolve(dotted: str) -> Any:
    """`module:attribute` from the route table."""
    module, _, attribute = dotted.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _strip_titles(node: Any) -> Any:
    """pydantic's auto-generated `title`s repeat the property names; they add nothing."""
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


@dataclass
class Components:
    schemas: dict[str, Schema] = field(default_factory=dict)

    def add_request(self, model: type[BaseModel]) -> str:
        return self._add(model.__name__, model.model_json_schema(ref_template=REF))

    def add_view(self, view: Any) -> str:
        """A TypedDict of joinplane.views."""
        return self._add(view.__name__, TypeAdapter(view).json_schema(ref_template=REF))

    def _add(self, name: str, schema: Schema) -> str:
        for inner, definition in schema.pop("$defs", {}).items():
            self._put(inner, definition)
        self._put(name, schema)
        return REF.format(model=name)

    def _put(self, name: str, schema: Schema) -> None:
        schema = _strip_titles(schema)
        if name in REQUEST_PATCHES and "properties" in schema:
            schema = copy.deepcopy(schema)
            REQUEST_PATCHES[name](schema)
        if name in self.schemas and self.schemas[name] != schema:
            raise ValueError(f"two different schemas are both called {name}")
        self.schemas[name] = schema


def _tag(route: Route) -> str:
    """The tag of the route's family, its first segment after /api/compute."""
    family = route.path.split("/")[3]
    if family not in TAGS:
        raise ValueError(f"{route.path}: a new family of routes needs its tag in contract/common.py's TAGS")
    return TAGS[family][0]


def operation(route: Route, components: Components) -> Schema:
    """The route's POST, its schemas added to `components`."""
    assert route.request is not None and route.response is not None, route
    request_model = _resolve(route.request)
    request_ref = components.add_request(request_model)
    response_ref = components.add_view(_resolve(route.response))
    # A missing body reads as `{}` (operator_api.validate): only a model with a required field
    # makes the body itself required.
    body_required = bool(request_model.model_json_schema().get("required"))
    return {
        "post": {
            "tags": [_tag(route)],
            "summary": route.summary,
            "description": route.description,
            "requestBody": {
                "required": body_required,
                "content": {JSON: {"schema": {"$ref": request_ref}, "example": copy.deepcopy(route.example)}},
            },
            "responses": {
                "200": {"description": "OK", "content": content(response_ref)},
                **operator_errors(),
            },
        }
    }
