"""The one place AWS clients are made: one per service per container, created on first use.

Clients come from botocore's session, which is exactly what `boto3.client()` returns, without
importing boto3 itself: `import boto3` also loads s3transfer, ~60 ms of cold start that no function
here uses. Endpoints follow the standard `AWS_ENDPOINT_URL` variable, which is how the local runtime
and the tests point every function at the embedded moto server.
"""

import functools
from typing import Any

from joinplane import container


@functools.cache
def _session() -> Any:
    import botocore.session

    return botocore.session.get_session()


@functools.cache
def client(service: str) -> Any:
    from botocore.config import Config

    return _session().create_client(
        service,
        config=Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=5),
    )


@container.on_reset_clients
def _reset() -> None:
    """Forget every client and the session (`container.reset()`, when the endpoint changes)."""
    client.cache_clear()
    _session.cache_clear()
