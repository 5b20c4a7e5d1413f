"""Races: threads released together against the moto server. Each guarantee is shown twice: our
code keeps it, and a naive read-then-write variant, run the same way, breaks it."""

from __future__ import annotations

from typing import Any

from joinplane import clock, keyauth, pools, store
from joinplane.errors import AlreadyExists, JoinplaneError
from joinplane_local.seed import install_admin_key
from tests.support import release_together

THREADS = 16


def naive_create_pool(request: pools.CreatePool) -> dict[str, Any]:
    """The bug we avoid: check for the pool, then write it, as two requests."""
    if store.get(*pools.pool_key(request.tenantId, request.poolId)) is not None:
        raise AlreadyExists("pool exists")
    clock.now()  # any work between the read and the write widens the window
    pk, sk = pools.pool_key(request.tenantId, request.poolId)
    item = {"pk": pk, "sk": sk, "tenantId": request.tenantId, "poolId": request.poolId, "name": request.name}
    store.put(item)
    return item


def request_for(index: int) -> pools.CreatePool:
    return pools.CreatePool(
        tenantId="acme", poolId="contested", siteId="s", name=f"owner-{index}", workspaceId="w"
    )


def test_concurrent_creates_of_one_pool_make_exactly_one(table: str) -> None:
    admin = keyauth.verify(install_admin_key("acme", None, "t"))
    assert admin is not None
    # When 16 callers create the same pool at once
    results = release_together(lambda i: pools.create(admin, request_for(i)), THREADS, catch=JoinplaneError)
    # Then exactly one wins, every other gets ALREADY_EXISTS, and the stored pool is the winner's
    winners = [r for r in results if isinstance(r, dict)]
    assert len(winners) == 1
    assert all(isinstance(r, AlreadyExists) for r in results if not isinstance(r, dict))
    stored = store.get(*pools.pool_key("acme", "contested"))
    assert stored is not None and stored["name"] == winners[0]["name"]


def test_the_naive_variant_lets_several_callers_believe_they_created_it(table: str) -> None:
    # When the same race runs against a read-then-write create (a barrier inside widens nothing:
    # the threads really do run both requests)
    results = release_together(lambda i: naive_create_pool(request_for(i)), THREADS, catch=JoinplaneError)
    # Then more than one caller was told it created the pool: the guarantee is broken
    assert len([r for r in results if isinstance(r, dict)]) > 1


def test_archive_racing_update_never_changes_an_archived_pool(table: str) -> None:
    admin = keyauth.verify(install_admin_key("acme", None, "t"))
    assert admin is not None
    pools.create(admin, request_for(0))
    ref = pools.PoolRef(tenantId="acme", poolId="contested")

    def work(index: int) -> Any:
        if index == 0:
            return pools.archive(admin, ref)
        return pools.update(admin, pools.UpdatePool(tenantId="acme", poolId="contested", name=f"n{index}"))

    results = release_together(work, THREADS, catch=JoinplaneError)
    archived = results[0]
    stored = store.get(*pools.pool_key("acme", "contested"))
    assert stored is not None and stored["state"] == "archived"
    # Every update that succeeded happened before the archive: its name is older than the archive's
    assert stored["name"] == archived["name"]
