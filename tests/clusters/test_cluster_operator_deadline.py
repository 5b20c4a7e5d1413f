"""The cluster operator routes within the invocation's time: rotateKey's retry loop checks the
deadline, and out of time is the operator envelope's 503 with Retry-After, having changed nothing."""

from __future__ import annotations

import json

from tests.support import LambdaContext, http_event, load_function
from tests.support.clusters import POOL, TENANT, Remaining, make_cluster, post
from tests.support.table import all_items

PATH = "/api/compute/clusters/rotateKey"


def rotate(admin_key: str, context: object) -> dict[str, object]:
    headers = {"authorization": f"Bearer {admin_key}"}
    authorizer = load_function("authorizer").lambda_handler(http_event(PATH, b"", headers), LambdaContext())
    body = json.dumps({"tenantId": TENANT, "poolId": POOL}).encode()
    event = http_event(PATH, body, headers, authorizer=authorizer["context"])
    result: dict[str, object] = load_function("clusters").lambda_handler(event, context)
    return result


def test_rotate_key_out_of_time_is_503_with_retry_after_and_changes_nothing(admin_key: str) -> None:
    # Given a cluster and its key
    key = make_cluster(admin_key)
    before = all_items()
    # When a rotation arrives with less time left than an attempt needs
    result = rotate(admin_key, Remaining(0.3))
    # Then it is the operator envelope's UNAVAILABLE with a retry hint
    assert result["statusCode"] == 503
    assert result["headers"]["retry-after"] == "1"  # type: ignore[index]
    error = json.loads(str(result["body"]))["error"]
    assert error["code"] == "UNAVAILABLE"
    assert {"reason": "out_of_time", "retryAfterSeconds": 1} in error["details"]
    # And nothing changed: the old key still opens the cluster
    assert all_items() == before
    assert post({"nodeId": "n", "nodeIp": "10.0.0.1", "nodeVersion": "1"}, key).status != 401
    # And with time to spare the rotation goes through
    assert rotate(admin_key, Remaining(5.0))["statusCode"] == 200
