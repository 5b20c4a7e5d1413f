"""Simulating a draft join policy over a pool's recent joins (docs/policy.md, "Simulation").

What is simulated is what is stored: each join request of the pool (a deferred join, with the
facts the machine sent and every attestor's verdict) and each machine the attestors admitted
without one. For each, the draft is evaluated over the same variables the join would build from
those facts, and its outcome is combined with the attestors' stored outcome by the join's own
function (`policy.combine`), so what the simulation says a rule does is what the rule does once
saved. Nothing is written and no event is published: the route only reads.

The work is bounded: at most `MAX_ITEMS` requests and `MAX_ITEMS` machines (the newest: one Query
per request state and one for the machines, each stopped at the limit), a draft of at most the
policy's rule limit, and each evaluation under the engine's cost limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field

from joinplane import clock, join_requests, machines, policy, pools
from joinplane.dal import machines as machines_db
from joinplane.dal import requests as requests_db
from joinplane.dal.machines import MachineRecord
from joinplane.dal.requests import JoinRequestRecord
from joinplane.grants import Principal

if TYPE_CHECKING:
    from datetime import datetime

    from joinplane import views

# Requests and machines read per simulation, each: enough for a day of a busy pool's joins, few
# enough that one call reads at most a few MB and evaluates the draft at most 400 times.
MAX_ITEMS = 200
DEFAULT_ITEMS = MAX_ITEMS

Decision = Literal["admit", "defer", "deny"]


class SimulatePolicy(pools.PoolRef):
    joinPolicy: list[policy.Rule] = Field(max_length=policy.MAX_RULES)
    limit: int = Field(default=DEFAULT_ITEMS, ge=1, le=MAX_ITEMS)


class Stored(NamedTuple):
    """One join as stored: its request, or (admitted without one) its machine."""

    request: JoinRequestRecord | None
    machine: MachineRecord | None

    @property
    def at(self) -> str:
        if self.request is not None:
            return self.request.created_at
        assert self.machine is not None
        return self.machine.joined_at

    @property
    def id(self) -> str:
        if self.request is not None:
            return self.request.request_id
        assert self.machine is not None
        return self.machine.machine_id


def attestors_outcome(stored: Stored) -> Decision:
    """What the attestors decided, as stored with the join: a machine admitted without a request
    was admitted by every attestor; a request carries each attestor's verdict (a request older
    than those verdicts, or a machine whose request is no longer stored, was deferred by them)."""
    if stored.request is None:
        assert stored.machine is not None
        return "defer" if stored.machine.request_id else "admit"
    verdicts = {v.verdict for v in stored.request.verdicts}
    if not verdicts:
        return "defer"
    return "deny" if "deny" in verdicts else "defer" if "defer" in verdicts else "admit"


def _site_token(request: JoinRequestRecord | None) -> bool:
    """A site token's join had no pool when it was made: no pool's policy applied to it."""
    return request is not None and any(r.code == "site_token" for r in request.reasons)


def simulate(principal: Principal, request: SimulatePolicy) -> views.PolicySimulation:
    pool = pools.load(principal, request.tenantId, request.poolId, pools.READ)
    # The answer shows what the pool's requests and machines carry: a key must be able to read both.
    resource = pools.resource_of(pool)
    principal.authorize(join_requests.READ, resource)
    principal.authorize(machines.READ, resource)
    compiled = policy.compile_policy(request.joinPolicy)
    now = clock.now()
    limit = request.limit
    # One more than asked of each: whether the pool has joins older than those simulated.
    stored_requests = requests_db.newest_in_pool(pool.tenant_id, pool.site_id, pool.pool_id, limit=limit + 1)
    stored_machines = machines_db.newest_in_pool(pool.tenant_id, pool.pool_id, limit=limit + 1)
    complete = len(stored_requests) <= limit and len(stored_machines) <= limit
    stored_requests, stored_machines = stored_requests[:limit], stored_machines[:limit]
    # A machine admitted through a request is that request's join: shown once, as the request.
    read = {r.request_id for r in stored_requests}
    joins = [Stored(r, None) for r in stored_requests] + [
        Stored(None, m) for m in stored_machines if m.request_id is None or m.request_id not in read
    ]
    joins.sort(key=lambda s: (s.at, s.id), reverse=True)
    items = [_simulated(pool, compiled, stored, now) for stored in joins]
    return {
        "tenantId": pool.tenant_id,
        "poolId": pool.pool_id,
        "simulatedAt": clock.rfc3339(now),
        "limit": limit,
        "complete": complete,
        "counts": counts(items),
        "items": items,
    }


def _simulated(pool: object, compiled: object, stored: Stored, now: datetime) -> views.SimulatedJoin:
    raise NotImplementedError  # wired to the policy engine below


def counts(items: list[views.SimulatedJoin]) -> views.SimulationCounts:
    def count(**wanted: object) -> int:
        return sum(all(item[k] == v for k, v in wanted.items()) for item in items)  # type: ignore[literal-required]

    return {
        "total": len(items),
        "wouldAdmit": count(decision="admit"),
        "wouldDefer": count(decision="defer"),
        "wouldDeny": count(decision="deny"),
        "unchanged": count(changed=False),
        "changed": count(changed=True),
        "deferredWouldAdmit": count(actual="deferred", decision="admit"),
        "deferredWouldDeny": count(actual="deferred", decision="deny"),
        "admittedWouldDefer": count(actual="admitted", decision="defer"),
        "admittedWouldDeny": count(actual="admitted", decision="deny"),
        "noMatch": count(rule=None),
        "errors": count(error=True),
    }
