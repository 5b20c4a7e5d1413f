"""POST /api/compute/clusters/{rotateKey,nodes/list,guests/list}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import operator_api
from joinplane.clusters import membership
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("ClustersFunction")


@routes.operation("clusters.rotateKey")
def rotate_key(request: HttpRequest) -> views.ClusterKeyRotated:
    return membership.rotate_key(*operator_api.parse(request, membership.RotateClusterKey))


@routes.operation("clusters.nodes.list")
def list_nodes(request: HttpRequest) -> views.ClusterNodeList:
    return membership.list_nodes(*operator_api.parse(request, membership.ListClusterNodes))


@routes.operation("clusters.guests.list")
def list_guests(request: HttpRequest) -> views.ClusterGuestList:
    return membership.list_guests(*operator_api.parse(request, membership.ListClusterGuests))


lambda_handler = routes.handle
