"""The dev tenant every local run starts with: tenant `dev`, site `dev-site`, pool `dev-pool`, and
a platform-admin API key (fixed by JOINPLANE_DEV_ADMIN_KEY, so scripts can keep using one key)."""

from __future__ import annotations

import contextlib

from joinplane import clock, credentials, ids, keyauth, pools
from joinplane.dal import apikeys as apikeys_db
from joinplane.dal.apikeys import ApiKeyRecord
from joinplane.errors import AlreadyExists, InvalidState
from joinplane.grants import Grant

DEV_TENANT, DEV_SITE, DEV_POOL = "dev", "dev-site", "dev-pool"
ADMIN_GRANTS = ("*@platform",)


def install_admin_key(tenant_id: str, secret: str | None, description: str) -> str:
    """Store a platform-admin key (the given secret, or a new one) and return the secret."""
    if secret is None:
        ulid = ids.new_ulid()
        secret = credentials.mint(keyauth.SECRET_PREFIX, ulid)
    else:
        parsed = credentials.parse(secret, keyauth.SECRET_PREFIX)
        if parsed is None:
            raise SystemExit(
                "JOINPLANE_DEV_ADMIN_KEY must look like jpk_<26 base32>_<32 base32>; "
                "leave it unset to get a fresh key printed"
            )
        ulid = parsed.ulid
    key = ApiKeyRecord(
        key_id=f"{keyauth.ID_PREFIX}_{ulid}",
        tenant_id=tenant_id,
        grants=tuple(str(Grant.parse(g)) for g in ADMIN_GRANTS),
        description=description,
        secret_sha256=credentials.digest(secret),
        state="active",
        created_at=clock.rfc3339(clock.now()),
        created_by="bootstrap",
    )
    apikeys_db.put(key)  # the same fixed key on every start: overwriting it is the point
    return secret


def seed_dev_tenant(admin_key: str | None, public_url: str = "http://127.0.0.1:3000") -> str:
    secret = install_admin_key(DEV_TENANT, admin_key, "local dev platform admin")
    admin = keyauth.verify(secret)
    assert admin is not None
    bootstrap = pools.BootstrapDefaults(controlplaneHttpUrl=public_url)
    try:
        pools.create(
            admin,
            pools.CreatePool(
                tenantId=DEV_TENANT,
                poolId=DEV_POOL,
                siteId=DEV_SITE,
                name="Dev pool",
                workspaceId="dev-workspace",
                bootstrap=bootstrap,
            ),
        )
    except AlreadyExists:
        # A persistent endpoint (--endpoint-url) keeps the pool from an earlier run, which served
        # another URL: point its machines at this one.
        # Archived there (by its user, or a test sharing the emulator): archived it stays.
        with contextlib.suppress(InvalidState):
            pools.update(admin, pools.UpdatePool(tenantId=DEV_TENANT, poolId=DEV_POOL, bootstrap=bootstrap))
    return secret
