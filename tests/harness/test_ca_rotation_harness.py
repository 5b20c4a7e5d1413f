"""The naive variant of a CA rotation loses the race the product's rotation survives
(tests/ca/test_kms_authorities.py: eight concurrent rotations make exactly one active CA;
tests/ca/test_rotation_phases.py: one prepared CA of concurrent rotations, one activation of many).

Written as a read of the pool's pointer followed by unconditional writes (the new CA, the old one
retired, the pointer repointed), the same release of callers leaves several "winners" and several
CAs marked active; written as dal.authorities writes it (one transaction conditioned on the pointer's
version), exactly one wins. The CA records here are inert (no KMS key): the race is the table's."""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from joinplane.dal import authorities as authorities_db
from joinplane.dal import dynamo
from joinplane.dal.authorities import CertificateAuthorityRecord
from joinplane.dal.pools import pool_key
from tests.support import release_together

pytestmark = pytest.mark.harness

THREADS = 16
TENANT = "acme"
AT = datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC)


def authority(pool: str, ca_id: str, previous: str | None) -> CertificateAuthorityRecord:
    return CertificateAuthorityRecord(
        ca_id=ca_id,
        tenant_id=TENANT,
        site_id="s1",
        pool_id=pool,
        key_id=f"key-{ca_id}",
        certificate_pem="",
        state="active",
        created_at="2026-12-01T00:00:00Z",
        created_by="harness",
        previous_ca_id=previous,
    )


def new_pool() -> str:
    pool = f"harness-{uuid.uuid4().hex[:8]}"
    dynamo.put({"pk": pool_key(TENANT, pool)[0], "sk": pool_key(TENANT, pool)[1], "state": "active"})
    authorities_db.create_first(authority(pool, f"ca_first_{pool}", None))
    return pool


def rotate_read_then_write(pool: str, index: int) -> bool:
    read = authorities_db.read(TENANT, pool)
    assert read is not None
    new = authority(pool, f"ca_{index}_{pool}", read.active.ca_id)
    dynamo.put(new.to_item())
    dynamo.update(
        *authorities_db.ca_key(read.active.ca_id),
        update="SET #s = :r",
        names={"#s": "state"},
        values={":r": "retired"},
    )
    dynamo.update(
        *authorities_db.pointer_key(TENANT, pool),
        update="SET activeCaId = :new, version = :next",
        values={":new": new.ca_id, ":next": read.pointer.version + 1},
    )
    return True


def rotate_conditionally(pool: str, index: int) -> bool:
    read = authorities_db.read(TENANT, pool)
    assert read is not None
    new = authority(pool, f"ca_{index}_{pool}", read.active.ca_id)
    try:
        authorities_db.rotate(read, new, now=AT, bundle_until=datetime.fromtimestamp(1, UTC), keep=[])
    except authorities_db.Contended:
        return False
    return True


def active_cas(pool: str) -> int:
    return Counter(ca.state for ca in authorities_db.list_pool(TENANT, pool))["active"]


def test_released_together_a_read_then_write_rotation_leaves_several_active_cas(table: str) -> None:
    pool = new_pool()
    winners = sum(release_together(lambda i: rotate_read_then_write(pool, i), THREADS))
    assert winners > 1
    assert active_cas(pool) > 1  # more than one CA believes it signs for the pool


def test_released_together_the_transactional_rotation_leaves_one_active_ca(table: str) -> None:
    pool = new_pool()
    results: list[Any] = release_together(lambda i: rotate_conditionally(pool, i), THREADS)
    # A caller that read after another's rotation committed rotates again, legitimately: what
    # the transaction guarantees is one active CA, every winner having retired its predecessor.
    states = Counter(ca.state for ca in authorities_db.list_pool(TENANT, pool))
    assert states == Counter({"active": 1, "retired": sum(results)})


# --- An upstream CA's import, racing rotations ---------------------------------------------------------


def pool_with_pending() -> tuple[str, CertificateAuthorityRecord]:
    pool = new_pool()
    pending = authority(pool, f"ca_pending_{pool}", None)._replace(state="pending")
    authorities_db.put_pending(pending, replacing=None)
    return pool, pending


def import_read_then_write(pool: str, pending: CertificateAuthorityRecord) -> bool:
    read = authorities_db.read(TENANT, pool)
    assert read is not None
    dynamo.update(
        *authorities_db.ca_key(pending.ca_id),
        update="SET #s = :a, previousCaId = :p",
        names={"#s": "state"},
        values={":a": "active", ":p": read.active.ca_id},
    )
    dynamo.update(
        *authorities_db.ca_key(read.active.ca_id),
        update="SET #s = :r",
        names={"#s": "state"},
        values={":r": "retired"},
    )
    dynamo.update(
        *authorities_db.pointer_key(TENANT, pool),
        update="SET activeCaId = :new, version = :next",
        values={":new": pending.ca_id, ":next": read.pointer.version + 1},
    )
    return True


def import_conditionally(pool: str, pending: CertificateAuthorityRecord) -> bool:
    read = authorities_db.read(TENANT, pool)
    try:
        authorities_db.activate_pending(
            read,
            pending,
            certificate_pem="",
            chain_pem=[],
            now=AT,
            activated_by="harness",
            activates_at=datetime.fromtimestamp(2, UTC),
            keep=[],
        )
    except (authorities_db.Contended, authorities_db.PendingChanged):
        return False
    return True


def import_among_rotations(pool: str, pending: CertificateAuthorityRecord, importer: Any, index: int) -> bool:
    # Thread 0 imports; the others rotate, as operators racing each other would.
    return importer(pool, pending) if index == 0 else rotate_conditionally(pool, index)


def test_released_with_rotations_a_read_then_write_import_leaves_several_active_cas(table: str) -> None:
    # Rounds, since a read-then-write only loses when a rotation commits between its read and writes.
    found = []
    for _ in range(4):
        pool, pending = pool_with_pending()
        release_together(
            functools.partial(import_among_rotations, pool, pending, import_read_then_write), THREADS
        )
        found.append(active_cas(pool))
    assert max(found) > 1, found


def test_released_with_rotations_the_transactional_import_leaves_one_active_ca(table: str) -> None:
    for _ in range(4):
        pool, pending = pool_with_pending()
        results: list[Any] = release_together(
            functools.partial(import_among_rotations, pool, pending, import_conditionally), THREADS
        )
        states = Counter(ca.state for ca in authorities_db.list_pool(TENANT, pool))
        # The import prepares its CA next to the active one (it retires nothing); each rotation that
        # won retired exactly one predecessor. Once a CA is prepared, no rotation wins.
        rotations = sum(results[1:])
        assert states["active"] == 1
        assert states["retired"] == rotations
        assert (states["prepared"], states["pending"]) == ((1, 0) if results[0] else (0, 1))
        pointer = authorities_db.get_pointer(TENANT, pool)
        assert pointer is not None
        assert pointer.next_ca_id == (pending.ca_id if results[0] else None)
        assert (pending.ca_id in pointer.bundle) == results[0]


# --- A rotation in phases: preparations racing, and activations racing preparations ------------------


def prepare_read_then_write(pool: str, index: int) -> bool:
    read = authorities_db.read(TENANT, pool)
    assert read is not None
    if read.next is not None:
        return False  # a CA is prepared already: the product refuses this rotation
    new = authority(pool, f"ca_{index}_{pool}", read.active.ca_id)._replace(state="prepared", activates_at=1)
    dynamo.put(new.to_item())
    dynamo.update(
        *authorities_db.pointer_key(TENANT, pool),
        update="SET nextCaId = :new, bundle = :bundle, version = :next",
        values={
            ":new": new.ca_id,
            ":bundle": [read.active.ca_id, new.ca_id],
            ":next": read.pointer.version + 1,
        },
    )
    return True


def prepare_conditionally(pool: str, index: int) -> bool:
    read = authorities_db.read(TENANT, pool)
    assert read is not None
    if read.next is not None:
        return False
    new = authority(pool, f"ca_{index}_{pool}", read.active.ca_id)._replace(state="prepared", activates_at=1)
    try:
        authorities_db.prepare(read, new, keep=[])
    except authorities_db.Contended:
        return False
    return True


def orphans(pool: str) -> int:
    """Prepared CAs the pool's pointer does not name next or publish: each would sign one day
    without any verifier having been given it."""
    pointer = authorities_db.get_pointer(TENANT, pool)
    assert pointer is not None
    return sum(
        1
        for ca in authorities_db.list_pool(TENANT, pool)
        if ca.state == "prepared" and (ca.ca_id != pointer.next_ca_id or ca.ca_id not in pointer.bundle)
    )


def test_released_together_a_read_then_write_preparation_leaves_unpublished_prepared_cas(table: str) -> None:
    pool = new_pool()
    winners = sum(release_together(lambda i: prepare_read_then_write(pool, i), THREADS))
    assert winners > 1
    assert orphans(pool) > 0  # a caller was told its CA is in the bundle; it is not


def test_released_together_the_transactional_preparation_prepares_one_published_ca(table: str) -> None:
    pool = new_pool()
    winners = sum(release_together(lambda i: prepare_conditionally(pool, i), THREADS))
    assert winners == 1
    assert Counter(ca.state for ca in authorities_db.list_pool(TENANT, pool))["prepared"] == 1
    assert orphans(pool) == 0


def pool_with_prepared() -> str:
    pool = new_pool()
    assert prepare_conditionally(pool, 0)
    return pool


def activate_read_then_write(pool: str) -> bool:
    read = authorities_db.read(TENANT, pool)
    assert read is not None
    if read.next is None:
        return False  # activated already, as far as this caller can tell
    dynamo.update(
        *authorities_db.ca_key(read.next.ca_id),
        update="SET #s = :a",
        names={"#s": "state"},
        values={":a": "active"},
    )
    dynamo.update(
        *authorities_db.ca_key(read.active.ca_id),
        update="SET #s = :r",
        names={"#s": "state"},
        values={":r": "retired"},
    )
    dynamo.update(
        *authorities_db.pointer_key(TENANT, pool),
        update="SET activeCaId = :new, bundle = :bundle, version = :next REMOVE nextCaId",
        values={
            ":new": read.next.ca_id,
            ":bundle": [read.next.ca_id, read.active.ca_id],
            ":next": read.pointer.version + 1,
        },
    )
    return True


def activate_conditionally(pool: str) -> bool:
    read = authorities_db.read(TENANT, pool)
    assert read is not None
    if read.next is None:
        return False
    try:
        authorities_db.activate(
            read,
            now=AT + timedelta(seconds=1),
            activated_by="harness",
            bundle_until=datetime.fromtimestamp(3, UTC),
            keep=[],
        )
    except authorities_db.Contended:
        return False
    return True


def activation_among_preparations(pool: str, activator: Any, index: int) -> bool:
    # Even threads activate the prepared CA (the end of its propagation period seen by many
    # containers, an operator's activate); odd ones prepare the next rotation as soon as they can.
    if index % 2 == 0:
        return bool(activator(pool))
    for _ in range(5):
        if prepare_conditionally(pool, index):
            break
    return False


def test_released_with_preparations_a_read_then_write_activation_activates_more_than_once(
    table: str,
) -> None:
    # Rounds, since a read-then-write only loses when another commits between its read and writes.
    activations = []
    for _ in range(2):
        pool = pool_with_prepared()
        results = release_together(
            functools.partial(activation_among_preparations, pool, activate_read_then_write), THREADS
        )
        activations.append(sum(results))
    # Several callers each "activated" the CA (each would report it, and retire the CA before it
    # again); a late one's pointer write can also drop a CA prepared meanwhile from the bundle
    # (seen in some rounds, not all: not asserted).
    assert max(activations) > 1, activations


def test_released_with_preparations_the_transactional_activation_activates_once(table: str) -> None:
    for _ in range(2):
        pool = pool_with_prepared()
        results = release_together(
            functools.partial(activation_among_preparations, pool, activate_conditionally), THREADS
        )
        assert sum(results) == 1
        states = Counter(ca.state for ca in authorities_db.list_pool(TENANT, pool))
        assert (states["active"], states["retired"]) == (1, 1)
        assert states["prepared"] <= 1 and orphans(pool) == 0
