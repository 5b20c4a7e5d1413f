"""The environment, parsed once per container into one typed object.

A NamedTuple rather than a pydantic model or a dataclass: every function reads it at cold start,
and a NamedTuple costs a tenth of a frozen dataclass to define."""

import functools
import os
from typing import NamedTuple

from joinplane import container


class Settings(NamedTuple):
    table_name: str
    event_bus_name: str = "default"
    # Secrets Manager name prefix for each pool's CA: `<prefix>/<tenantId>/<poolId>`.
    ca_secret_prefix: str = "joinplane/ca"
    # The authority of every machine's SPIFFE ID (template parameter SpiffeTrustDomain). Checked
    # where IDs are made (joinplane.spiffe), so a bad value fails certificate issuance, not every function.
    spiffe_trust_domain: str = "joinplane.internal"
    # How long the audit trail keeps an event (template parameter AuditRetentionDays).
    audit_retention_days: int = 400


@functools.cache
def settings() -> Settings:
    return Settings(
        table_name=os.environ["TABLE_NAME"],
        event_bus_name=os.environ.get("EVENT_BUS_NAME", "default"),
        ca_secret_prefix=os.environ.get("CA_SECRET_PREFIX", "joinplane/ca"),
        spiffe_trust_domain=os.environ.get("SPIFFE_TRUST_DOMAIN", "joinplane.internal"),
        audit_retention_days=int(os.environ.get("AUDIT_RETENTION_DAYS", "400")),
    )


container.on_reset(settings.cache_clear)
