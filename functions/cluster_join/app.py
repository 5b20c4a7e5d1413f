"""POST /cluster/accept-join (and Sylve's /api/cluster/accept-join): Sylve's accept-join dialect
(X-Cluster-Key, the status/message/error/data envelope). The order is the contract: credential
(403/401) before size (413) before the body is parsed (400), then the leader's checks."""

from typing import Any

from joinplane import observe
from joinplane.clusters import membership, sylve_wire
from joinplane.errors import JoinplaneError
from joinplane.http import HttpRequest, Router

routes = Router("ClusterJoinFunction", sylve_wire.render_error, lambda answer: sylve_wire.success(*answer))


@routes.operation("clusterAcceptJoin", "clusterAcceptJoinApi")
def accept_join(request: HttpRequest) -> tuple[str, Any]:
    try:
        cluster = membership.authenticate(sylve_wire.cluster_key(request.headers))
        join = sylve_wire.decode_accept_join(sylve_wire.body(request))
        return membership.accept_join(cluster, join)
    except JoinplaneError as error:
        observe.decision(
            "cluster node refused", "ClusterJoins", "refused", code=error.code, reason=error.reason
        )
        raise


lambda_handler = routes.handle
