"""POST /api/compute/tpmAllowList/{add,list,remove} and .../tpmAllowList/manufacturers/{add,list,remove}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import operator_api, tpm_allow, tpm_manufacturers
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


@routes.operation("tpmAllowList.manufacturers.add")
def add_manufacturer(request: HttpRequest) -> views.TpmManufacturer:
    return tpm_manufacturers.add(*operator_api.parse(request, tpm_manufacturers.AddManufacturer))


@routes.operation("tpmAllowList.manufacturers.list")
def list_manufacturers(request: HttpRequest) -> views.TpmManufacturerList:
    return tpm_manufacturers.list_manufacturers(
        *operator_api.parse(request, tpm_manufacturers.ListManufacturers)
    )


@routes.operation("tpmAllowList.manufacturers.remove")
def remove_manufacturer(request: HttpRequest) -> views.TpmManufacturer:
    return tpm_manufacturers.remove(*operator_api.parse(request, tpm_manufacturers.RemoveManufacturer))


lambda_handler = routes.handle
