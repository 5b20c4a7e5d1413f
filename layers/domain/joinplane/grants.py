"""The grant language: `PERMISSION@SCOPE`.

PERMISSION is colon-separated segments (`compute:join-tokens:read`); a segment may be `*`, and a
trailing `*` also stands for any number of further segments (`compute:*` covers
`compute:join-tokens:read`). SCOPE is `platform` (every tenant), `tenant` (the key's tenant),
`site/<siteId>`, `compute-pool/<poolId>` or `compute-pool/*` (every pool of the key's tenant).

Two questions are asked of a principal, and they are kept apart on purpose:
- `sees(resource)`: does any grant reach this resource at all? If not, the resource is reported
  `NOT_FOUND`, never hinting that it exists.
- `can(permission, resource)`: does a grant with this permission reach it? If it is seen but not
  permitted, the answer is `PERMISSION_DENIED`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from joinplane.errors import InvalidArgument, NotFound, PermissionDenied

SEGMENT = r"(?:\*|[a-z][a-z0-9-]{0,62})"
PERMISSION_PATTERN = rf"{SEGMENT}(?::{SEGMENT}){{0,5}}"
POOL_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
SCOPE_PATTERN = rf"platform|tenant|site/{POOL_ID_PATTERN}|compute-pool/(?:\*|{POOL_ID_PATTERN})"
GRANT_PATTERN = rf"^(?P<permission>{PERMISSION_PATTERN})@(?P<scope>{SCOPE_PATTERN})$"


class Grant(NamedTuple):
    permission: str
    scope: str

    @classmethod
    def parse(cls, text: str) -> Grant:
        match = re.fullmatch(GRANT_PATTERN, text)
        if not match:
            raise InvalidArgument(
                f"grant {text[:300]!r} is not PERMISSION@SCOPE (scope: platform, tenant, site/<siteId>, "
                "compute-pool/<poolId> or compute-pool/*)",
                [{"field": "grants", "reason": "malformed grant"}],
            )
        return cls(match["permission"], match["scope"])

    def __str__(self) -> str:
        return f"{self.permission}@{self.scope}"


class Resource(NamedTuple):
    """What a request acts on. A pool has a site; a site-level resource has no pool; a
    tenant-level resource (API keys, the pool list) has neither. A site-level resource is reached
    by `site/<siteId>`, `tenant` and `platform` grants only: no `compute-pool/...` grant ever
    reaches a site, which is why a pool-scoped key cannot place a pool in one
    (`pools.authorize_placement`)."""

    tenant_id: str
    site_id: str | None = None
    pool_id: str | None = None
    kind: str = "resource"


def permission_covers(held: str, wanted: str) -> bool:
    """Does the held permission pattern include every permission the wanted one names?"""
    held_parts, wanted_parts = held.split(":"), wanted.split(":")
    for index, part in enumerate(held_parts):
        last = index == len(held_parts) - 1
        if index >= len(wanted_parts):
            return False
        if part == "*":
            if last:
                return True
            continue
        if part != wanted_parts[index]:
            return False
    return len(held_parts) == len(wanted_parts)


def scope_reaches(scope: str, key_tenant: str, resource: Resource) -> bool:
    if scope == "platform":
        return True
    if resource.tenant_id != key_tenant:
        return False
    if scope == "tenant":
        return True
    kind, _, name = scope.partition("/")
    if kind == "site":
        return resource.site_id == name
    if kind == "compute-pool":
        return resource.pool_id is not None and name in ("*", resource.pool_id)
    return False


def scope_contains(held: str, wanted: str) -> bool:
    """Is every resource the wanted scope reaches also reached by the held one (same tenant)?"""
    if held == wanted or held == "platform":
        return True
    if wanted == "platform":
        return False
    if held == "tenant":
        return True
    return held == "compute-pool/*" and wanted.startswith("compute-pool/")


class Principal(NamedTuple):
    """The caller of an operator route: an API key, as the authorizer resolved it."""

    key_id: str
    tenant_id: str
    grants: tuple[Grant, ...]

    @property
    def is_platform(self) -> bool:
        return any(g.scope == "platform" for g in self.grants)

    def sees(self, resource: Resource) -> bool:
        return any(scope_reaches(g.scope, self.tenant_id, resource) for g in self.grants)

    def can(self, permission: str, resource: Resource) -> bool:
        return any(
            permission_covers(g.permission, permission) and scope_reaches(g.scope, self.tenant_id, resource)
            for g in self.grants
        )

    def may_grant(self, grant: Grant, tenant_id: str) -> bool:
        """No key can hand out more than it holds: each grant of a new key (of `tenant_id`) must be
        contained in one of the creator's own. Scopes other than `platform` are relative to the
        holder's tenant, so for a key of another tenant only the creator's `@platform` grants count:
        `compute:*@tenant` held in tenant A says nothing about tenant B."""
        return any(
            permission_covers(g.permission, grant.permission)
            and scope_contains(g.scope, grant.scope)
            and (tenant_id == self.tenant_id or g.scope == "platform")
            for g in self.grants
        )

    def check_tenant(self, tenant_id: str) -> None:
        if tenant_id != self.tenant_id and not self.is_platform:
            raise PermissionDenied(f"tenantId {tenant_id!r} is not this API key's tenant")

    def authorize(self, permission: str, resource: Resource) -> None:
        """The one order every operator route follows: tenant, visibility, permission."""
        self.check_tenant(resource.tenant_id)
        if not self.sees(resource):
            raise NotFound(f"{resource.kind} not found")
        if not self.can(permission, resource):
            raise PermissionDenied(f"this API key lacks {permission} for this {resource.kind}")
