"""`python -m joinplane.contract > shared/openapi.json`: the OpenAPI document, from the route table."""

from joinplane.contract.openapi import render

print(render(), end="")
