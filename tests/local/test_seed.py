"""The dev tenant's seed runs again on every start against a persistent store (--endpoint-url, or
an emulator other runtimes of the same process share): whatever its user did there, it starts."""

from __future__ import annotations

from joinplane import keyauth, pools
from joinplane_local import seed


def test_a_restart_finds_the_dev_pool_archived_and_starts_anyway(table: str) -> None:
    # Given a store where the dev pool was seeded, then archived by its user
    first = seed.seed_dev_tenant(None, public_url="http://127.0.0.1:3000")
    admin = keyauth.verify(first)
    assert admin is not None
    pools.archive(admin, pools.PoolRef(tenantId=seed.DEV_TENANT, poolId=seed.DEV_POOL))
    # When the runtime seeds again (another URL, as a restart on another port would)
    again = seed.seed_dev_tenant(None, public_url="http://127.0.0.1:3777")
    # Then it has a working admin key, and the archived pool stays archived
    admin = keyauth.verify(again)
    assert admin is not None
    pool = pools.get(admin, pools.PoolRef(tenantId=seed.DEV_TENANT, poolId=seed.DEV_POOL))
    assert pool["state"] == "archived"
