"""Races on pools: threads released together against the moto server. That a read-then-write
create would lose the same race is the harness's own check (tests/harness/test_race_harness.py,
create-once), so a pass here means the pool code kept the guarantee."""

from __future__ import annotations

from typing import Any

from joinplane import keyauth, pools
from joinplane.dal import dynamo
from joinplane.dal.pools import pool_key
from joinplane.errors import AlreadyExists, JoinplaneError
from joinplane_local.seed import install_admin_key
from tests.support import release_together

THREADS = 16


def request_for(index: int) -> pools.CreatePool:
    return pools.CreatePool(
        tenantId="acme", poolId="contested", siteId="s", name=f"owner-{index}", workspaceId="w"
    )


def test_concurrent_creates_of_one_pool_make_exactly_one(table: str) -> None:
    # Given a tenant admin
    admin = keyauth.verify(install_admin_key("acme", None, "t"))
    assert admin is not None
    # When 16 callers create the same pool at once
    results = release_together(lambda i: pools.create(admin, request_for(i)), THREADS, catch=JoinplaneError)
    # Then exactly one wins, every other gets ALREADY_EXISTS, and the stored pool is the winner's
    winners = [r for r in results if isinstance(r, dict)]
    assert len(winners) == 1
    assert all(isinstance(r, AlreadyExists) for r in results if not isinstance(r, dict))
    stored = dynamo.get(*pool_key("acme", "contested"))
    assert stored is not None and stored["name"] == winners[0]["name"]


def test_archive_racing_update_never_changes_an_archived_pool(table: str) -> None:
    # Given a pool
    admin = keyauth.verify(install_admin_key("acme", None, "t"))
    assert admin is not None
    pools.create(admin, request_for(0))
    ref = pools.PoolRef(tenantId="acme", poolId="contested")

    def work(index: int) -> Any:
        if index == 0:
            return pools.archive(admin, ref)
        return pools.update(admin, pools.UpdatePool(tenantId="acme", poolId="contested", name=f"n{index}"))

    # When one caller archives it while 15 others rename it
    results = release_together(work, THREADS, catch=JoinplaneError)
    # Then the pool is archived and keeps the name it had when it was archived
    archived = results[0]
    stored = dynamo.get(*pool_key("acme", "contested"))
    assert stored is not None and stored["state"] == "archived"
    # Every update that succeeded happened before the archive: its name is older than the archive's
    assert stored["name"] == archived["name"]
