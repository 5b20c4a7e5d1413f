"""The single place boto3 is imported: one client per service per container.

Clients are created on first use, not at import, so a function pays only for the services it
calls. Endpoints follow the standard `AWS_ENDPOINT_URL` variable, which is how the local runtime
and the tests point every function at the embedded moto server.
"""

import functools
from typing import Any


@functools.cache
def client(service: str) -> Any:
    import boto3
    from botocore.config import Config

    # The service name is a plain str here; boto3-stubs only types literal names.
    return boto3.client(  # type: ignore[call-overload]
        service,
        config=Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=5),
    )


def reset() -> None:
    """Forget every client (tests and the local runtime, when the endpoint changes)."""
    client.cache_clear()
