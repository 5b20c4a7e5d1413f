"""What Lambda hands a handler: the context object and API Gateway HTTP API (payload 2.0) events."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any


@dataclass
class LambdaContext:
    function_name: str = "test"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:test"
    aws_request_id: str = ""
    remaining_millis: int = 10_000  # what the invocation has left (a small value: nearly out of time)

    def __post_init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_millis


def http_event(
    path: str,
    body: bytes | str,
    headers: dict[str, str] | None = None,
    authorizer: dict[str, Any] | None = None,
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else body.encode()
    try:
        text, encoded = raw.decode(), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(raw).decode(), True
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": f"POST {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json", **{k.lower(): v for k, v in (headers or {}).items()}},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
            "http": {
                "method": "POST",
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": "pytest",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"POST {path}",
            "stage": "$default",
            "time": "30/Nov/2026:00:00:00 +0000",
            "timeEpoch": 0,
        },
        "body": text,
        "isBase64Encoded": encoded,
    }
    if authorizer is not None:
        event["requestContext"]["authorizer"] = {"lambda": authorizer}
    return event
