"""The one place AWS clients are made: one per service per container, created on first use.

Clients come from botocore's session, which is exactly what `boto3.client()` returns, without
importing boto3 itself: `import boto3` also loads s3transfer, ~60 ms of cold start that no function
here uses. Endpoints follow the standard `AWS_ENDPOINT_URL` variable, which is how the local runtime
and the tests point every function at the embedded moto server.

The first client a process makes also freezes the garbage collector's view of what is loaded by
then (`gc.freeze()`): the modules, pydantic's models and botocore's service model live as long as
the container, yet every full collection would walk them all again. Without it, the first client
of a function that loads pydantic sets off a full collection over everything imported, ~20 ms of
its cold start (`make bench`); boto3 alone stays under the threshold. Only cyclic garbage is
affected (reference counting still frees the rest), and only what exists at that moment, once per
process, so the local runtime and the tests, which make clients again after a reset, freeze once.
"""

import functools
import gc
from collections.abc import Callable, Iterator
from typing import Any

from joinplane import container

_frozen = [False, False]  # before the first session, after the first client
# Called with (service, client) for each client made: the local runtime and the tests check every
# call a function makes against that function's IAM policy there (joinplane_local.iam), as IAM
# would. Deployed, nothing registers.
_made_hooks: list[Callable[[str, Any], None]] = []


def on_client(hook: Callable[[str, Any], None]) -> None:
    """Run `hook(service, client)` on every client made from now on (once per hook)."""
    if hook not in _made_hooks:
        _made_hooks.append(hook)


def _freeze(after_client: bool) -> None:
    if not _frozen[after_client]:
        _frozen[after_client] = True
        gc.freeze()


class _ServiceNames:
    """What botocore's loader answers to "which services are there?" for one model type. botocore
    asks before loading any model, twice per first client (service-2, endpoint-rule-set-1), and
    answers by listing all of its 400-odd data directories: ~16 ms of every cold start, a twelfth
    of boto3's whole client. `name in` this looks in that one service's directory (the listing
    botocore does next anyway, and caches); iterating it, which only an error message does, is
    botocore's own full listing."""

    def __init__(self, loader: Any, type_name: str) -> None:
        self._loader, self._type_name = loader, type_name

    def __contains__(self, name: object) -> bool:
        from botocore.exceptions import DataNotFoundError

        try:
            return isinstance(name, str) and bool(self._loader.list_api_versions(name, self._type_name))
        except DataNotFoundError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(type(self._loader).list_available_services(self._loader, self._type_name))


@functools.cache
def _session() -> Any:
    _freeze(after_client=False)
    import botocore.session

    session = botocore.session.get_session()
    loader = session.get_component("data_loader")
    loader.list_available_services = functools.partial(_ServiceNames, loader)
    return session


@functools.cache
def client(service: str) -> Any:
    from botocore.config import Config

    made = _session().create_client(
        service,
        config=Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=5),
    )
    _freeze(after_client=True)
    for hook in _made_hooks:
        hook(service, made)
    return made


@container.on_reset_clients
def _reset() -> None:
    """Forget every client and the session (`container.reset()`, when the endpoint changes)."""
    client.cache_clear()
    _session.cache_clear()
