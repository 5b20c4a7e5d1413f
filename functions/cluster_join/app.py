"""POST /cluster/accept-join: seed 000, Sylve's dialect (X-Cluster-Key, the status/message/error/data
envelope). The order is the contract: credential (403/401) before size (413) before the body is
parsed (400), then the leader's checks."""

import logging
from typing import Any

from joinplane import deadline
from joinplane.clusters import membership, sylve_wire
from joinplane.errors import Internal, JoinplaneError, NotFound
from joinplane.http import HttpRequest

logger = logging.getLogger("joinplane")

# A Sylve node posts to `https://<leader>/api/cluster/accept-join`; the seed documents the path
# without the API's `/api` base. Both are this endpoint.
PATHS = frozenset({"/cluster/accept-join", "/api/cluster/accept-join"})


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    deadline.begin(context)
    try:
        return _handle(event)
    finally:
        deadline.end()


def _handle(event: dict[str, Any]) -> dict[str, Any]:
    request = HttpRequest.from_event(event)
    try:
        if request.method != "POST" or request.path not in PATHS:
            raise NotFound("no such route")
        cluster = membership.authenticate(sylve_wire.cluster_key(request.headers))
        join = sylve_wire.decode_accept_join(sylve_wire.body(request))
        return sylve_wire.success(*membership.accept_join(cluster, join))
    except JoinplaneError as refused:
        logger.info("accept-join refused: %s %s", refused.code, refused.message)
        return sylve_wire.render_error(refused)
    except Exception:
        logger.exception("unhandled error on accept-join")
        return sylve_wire.render_error(Internal("internal error"))
