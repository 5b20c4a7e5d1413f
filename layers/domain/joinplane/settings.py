"""The environment, parsed once per container into one typed object.

A frozen dataclass rather than a pydantic model: the authorizer reads it too, and its cold start
should not pay for pydantic."""

import functools
import os
from dataclasses import dataclass

from joinplane import container


@dataclass(frozen=True)
class Settings:
    table_name: str
    event_bus_name: str = "default"
    # Secrets Manager name prefix for each pool's CA: `<prefix>/<tenantId>/<poolId>`.
    ca_secret_prefix: str = "joinplane/ca"
    # The authority of every machine's SPIFFE ID (template parameter SpiffeTrustDomain). Checked
    # where IDs are made (joinplane.spiffe), so a bad value fails certificate issuance, not every function.
    spiffe_trust_domain: str = "joinplane.internal"


@functools.cache
def settings() -> Settings:
    return Settings(
        table_name=os.environ["TABLE_NAME"],
        event_bus_name=os.environ.get("EVENT_BUS_NAME", "default"),
        ca_secret_prefix=os.environ.get("CA_SECRET_PREFIX", "joinplane/ca"),
        spiffe_trust_domain=os.environ.get("SPIFFE_TRUST_DOMAIN", "joinplane.internal"),
    )


container.on_reset(settings.cache_clear)
