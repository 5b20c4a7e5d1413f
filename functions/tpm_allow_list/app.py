"""POST /api/compute/tpmAllowList/{add,list,remove}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import operator_api, tpm_allow
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("TpmAllowListFunction")


@routes.operation("tpmAllowList.add")
def add(request: HttpRequest) -> views.AllowedKey:
    return tpm_allow.add(*operator_api.parse(request, tpm_allow.AddKey))


@routes.operation("tpmAllowList.list")
def list_keys(request: HttpRequest) -> views.AllowedKeyList:
    return tpm_allow.list_keys(*operator_api.parse(request, tpm_allow.ListKeys))


@routes.operation("tpmAllowList.remove")
def remove(request: HttpRequest) -> views.AllowedKey:
    return tpm_allow.remove(*operator_api.parse(request, tpm_allow.RemoveKey))


lambda_handler = routes.handle
