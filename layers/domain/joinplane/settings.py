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
    # Each pool CA's KMS key is aliased `<prefix>/<caId>` (template: alias/joinplane/<stack>) and
    # tagged joinplane:stack=<tag>, the tag IAM lets the functions sign with.
    kms_alias_prefix: str = "alias/joinplane/joinplane-local"
    kms_stack_tag: str = "joinplane-local"
    # The authority of every machine's SPIFFE ID (template parameter SpiffeTrustDomain). Checked
    # where IDs are made (joinplane.spiffe), so a bad value fails certificate issuance, not every function.
    spiffe_trust_domain: str = "joinplane.internal"
    # How long the audit trail keeps an event (template parameter AuditRetentionDays).
    audit_retention_days: int = 400
    # Where the AWS IAM join forwards its signed GetCallerIdentity (template parameter
    # StsEndpointUrl): "" sends each to the allow-listed STS host it was signed for (joinplane.aws_iam).
    sts_endpoint_url: str = ""
    # Who signs machine certificates (template parameter SigningMode, docs/pki.md): "kms", the pool
    # CA's KMS key signs each one; "intermediate", it signs a short-lived intermediate CA per
    # container, whose in-memory key signs them.
    signing_mode: str = "kms"


SIGNING_MODES = ("kms", "intermediate")


@functools.cache
def settings() -> Settings:
    return Settings(
        table_name=os.environ["TABLE_NAME"],
        event_bus_name=os.environ.get("EVENT_BUS_NAME", "default"),
        kms_alias_prefix=os.environ.get("KMS_ALIAS_PREFIX", "alias/joinplane/joinplane-local"),
        kms_stack_tag=os.environ.get("KMS_STACK_TAG", "joinplane-local"),
        spiffe_trust_domain=os.environ.get("SPIFFE_TRUST_DOMAIN", "joinplane.internal"),
        audit_retention_days=int(os.environ.get("AUDIT_RETENTION_DAYS", "400")),
        sts_endpoint_url=os.environ.get("STS_ENDPOINT_URL", ""),
        # Checked where certificates are signed (joinplane.ca_keys.intermediate_mode), as the trust
        # domain is: a hand-edited value fails issuance, not every function.
        signing_mode=os.environ.get("SIGNING_MODE") or "kms",
    )


container.on_reset(settings.cache_clear)
