"""Simulating a draft join policy over a pool's recent joins (docs/policy.md, Simulation).

What is simulated is what is stored: each join request of the pool (a deferred join, with the facts
the machine sent and every attestor's verdict) and each machine the attestors admitted without one.
For each, the draft is evaluated over the variables the join would have built from those facts
(`policy.variables`, at the time the join was made), and its outcome is applied to the attestors'
stored outcome by the join's own function (`join_decide.apply_policy`), so what the simulation says
a rule does is what the rule does once saved. Nothing is written and no event is published.

The work is bounded: at most `MAX_ITEMS` requests and `MAX_ITEMS` machines, the newest (one Query
per request state and one for the machines, each stopped at the limit), plus BatchGetItems for the
requests of machines outside that window, for the tokens the joins came with and, for a draft that
reads `site`, one per join whose token looks machines up in the site's inventory; a draft of at
most `policy.MAX_RULES` rules, its evaluation per join under the engine's budget.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field

from joinplane import attestors, clock, deadline, join_decide, join_requests, machines, policy, pools
from joinplane.attestors import Vote
from joinplane.dal import recent
from joinplane.dal.machines import MachineFactsRecord, MachineRecord
from joinplane.dal.requests import JoinRequestRecord
from joinplane.dal.tokens import JoinTokenRecord
from joinplane.errors import PermissionDenied
from joinplane.grants import Principal, Resource
from joinplane.join_decide import Admit, AdmitByPolicy, Defer
from joinplane.policy_rules import JoinPolicy

if TYPE_CHECKING:
    from joinplane import policy_views, views

# The discovery API's read permission (joinplane.discovery.READ, a module a draft not reading the
# site does not load).
DISCOVERY_READ = "compute:discovery:read"
# Requests and machines read per simulation, each: a busy pool's day of joins, few enough that one
# call reads a few MB at most and evaluates the draft for at most 400 joins.
MAX_ITEMS = 200
# Seconds one call may spend deciding joins (each evaluation is also held to the join's own budget):
# well under the function's timeout, and ten times what 400 joins take under 32 rules that all have
# to be evaluated (0.4 s measured; docs/policy.md, Simulation).
BUDGET_SECONDS = 4.0

Decision = Literal["admit", "defer", "deny"]


class SimulatePolicy(pools.PoolRef):
    joinPolicy: JoinPolicy
    limit: int = Field(default=MAX_ITEMS, ge=1, le=MAX_ITEMS)


class Stored(NamedTuple):
    """One join as stored: its request (and the machine an approval made of it, by id), or the
    machine the attestors admitted without one. `machine` alone with a `request_id`: a machine
    whose request is no longer stored."""

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

    @property
    def facts(self) -> MachineFactsRecord:
        if self.request is not None:
            return self.request.machine
        assert self.machine is not None
        return self.machine.facts

    @property
    def site_id(self) -> str:
        if self.request is not None:
            return self.request.site_id
        assert self.machine is not None
        return self.machine.site_id

    @property
    def token_id(self) -> str | None:
        if self.request is not None:
            return self.request.token_id
        assert self.machine is not None
        return self.machine.token_id


def attestors_outcome(stored: Stored) -> Decision:
    """What the attestors decided, as stored with the join: a machine admitted without a request
    was admitted by every attestor; a request carries each attestor's verdict (a request older than
    those verdicts, or a machine whose request is no longer stored, was deferred by them)."""
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
    limit = request.limit
    # One more than asked of each: whether the pool has joins older than those simulated.
    newest_requests = recent.requests_of_pool(pool.tenant_id, pool.site_id, pool.pool_id, limit=limit + 1)
    newest_machines = recent.machines_of_pool(pool.tenant_id, pool.pool_id, limit=limit + 1)
    complete = len(newest_requests) <= limit and len(newest_machines) <= limit
    joins = _joins(newest_requests[:limit], newest_machines[:limit])
    tokens = recent.tokens_by_id(s.token_id for s in joins if s.token_id)
    # The site's inventory is read only for a draft that reads `site`: no rule can depend on it else.
    inventory = any(re.search(r"\bsite\b", rule.when) for rule in request.joinPolicy)
    site = Resource(pool.tenant_id, pool.site_id, kind="site")
    if inventory and not principal.can(DISCOVERY_READ, site):
        # A draft's decisions answer questions on the entries (`site.discovery.hostname < "m"`):
        # only a key that may list the inventory may ask them.
        raise PermissionDenied(
            f"this draft reads the site's discovery inventory: the API key lacks {DISCOVERY_READ} for site "
            f"{pool.site_id!r}"
        )
    now = clock.now()
    items: list[policy_views.SimulatedJoin] = []
    started = time.monotonic()
    for stored in joins:
        # Newest first: a call that runs out of its budget answers the newest joins it simulated,
        # and says older ones were not (`complete: false`), rather than running on.
        if time.monotonic() - started > BUDGET_SECONDS or deadline.remaining() < deadline.DEFAULT_RESERVE:
            complete = False
            break
        items.append(_simulated(compiled, stored, tokens, inventory, now, pool.approvals_required))
    return {
        "tenantId": pool.tenant_id,
        "poolId": pool.pool_id,
        "simulatedAt": clock.rfc3339(now),
        "limit": limit,
        "complete": complete,
        "counts": counts(items),
        "items": items,
    }


def _joins(requests: list[JoinRequestRecord], admitted: list[MachineRecord]) -> list[Stored]:
    """Each join once, newest first: a machine an approval made is its request's join, read with the
    other requests or, older than them, by its id."""
    by_id = {r.request_id: r for r in requests}
    older = recent.requests_by_id(
        m.request_id for m in admitted if m.request_id and m.request_id not in by_id
    )
    joins = [Stored(r, None) for r in requests]
    for machine in admitted:
        if machine.request_id is None:
            joins.append(Stored(None, machine))
        elif machine.request_id in older:
            joins.append(Stored(older.pop(machine.request_id), None))
        elif machine.request_id not in by_id:
            joins.append(Stored(None, machine))
    joins.sort(key=lambda s: (s.at, s.id), reverse=True)
    return joins


def _outcome(
    compiled: policy.CompiledPolicy,
    stored: Stored,
    token: JoinTokenRecord | None,
    inventory: bool,
) -> policy.PolicyOutcome | None:
    """The draft's outcome for a join, over the variables the join built (`join._with_policy`): the
    facts, token, verdicts and reasons as stored, the site's discovery entry (looked up as the join
    did, from the site's inventory as it is now, and only when a rule reads `site`: `inventory`),
    and the time the join was made."""
    request = stored.request
    entry = None
    if inventory and token is not None and token.attestation.discovery == "defer-unknown":
        from joinplane import discovery

        facts = stored.facts
        match = discovery.lookup(
            token.tenant_id,
            stored.site_id,
            serial=facts.hardware.serial_number or None,
            system_uuid=facts.hardware.system_uuid or None,
            macs=list(facts.hardware.mac_addresses or ()),
            fingerprint=facts.fingerprint or None,
        )
        entry = policy.DiscoveryEntry(match.entry_id, match.hostname, match.matched_by) if match else None
    activation = policy.variables(
        stored.facts,
        token=token,
        verdicts=[(v.attestor, v.verdict) for v in request.verdicts] if request else [],
        reasons=request.reasons if request else (),
        site_id=stored.site_id,
        discovery=entry,
        now=datetime.fromisoformat(stored.at),
    )
    return policy.evaluate(compiled, activation)


def _decision(
    stood: Decision, stored: Stored, outcome: policy.PolicyOutcome | None, approvals_required: int = 1
) -> Decision:
    """What the join decides from the attestors' outcome and the policy's, by the join's own rule
    (`join_decide.apply_policy`). An attestor's deny never reaches the policy; a rule's approval
    admits only in a pool that requires one approval (else the request waits for keys)."""
    if stood == "deny":
        return "deny"
    votes = tuple(
        Vote(r.attestor, attestors.DEFER, r.code, r.message)
        for r in (stored.request.reasons if stored.request else ())
        if r.attestor != join_decide.POLICY
    )
    fresh: Admit | Defer = Admit() if stood == "admit" else Defer(votes)
    match join_decide.apply_policy(fresh, outcome, approvals_required):
        case Admit() | AdmitByPolicy():
            return "admit"
        case Defer():
            return "defer"
    return "deny"


def _simulated(
    compiled: policy.CompiledPolicy,
    stored: Stored,
    tokens: dict[str, JoinTokenRecord],
    inventory: bool,
    now: datetime,
    approvals_required: int = 1,
) -> policy_views.SimulatedJoin:
    request, machine = stored.request, stored.machine
    stood = attestors_outcome(stored)
    token = tokens.get(stored.token_id) if stored.token_id else None
    # A site token's join had no pool when it was made: no pool's policy applied to it.
    site_token = _site_token(request) or (token is not None and token.pool_id is None)
    outcome = None if site_token else _outcome(compiled, stored, token, inventory)
    decision = _decision(stood, stored, outcome, approvals_required)
    actual = _actual(stored)
    if request is not None:
        state: str = request.state_at(now)
        machine_id = request.machine_id
    else:
        assert machine is not None
        state, machine_id = machine.state, machine.machine_id
    return {
        "kind": "request" if request is not None else "join",
        "id": stored.id,
        "machineId": machine_id,
        "hostname": stored.facts.hostname,
        "tokenId": stored.token_id,
        "at": stored.at,
        "attestors": stood,
        "actual": actual,
        "state": state,
        "decidedBy": request.decided_by if request is not None else None,
        "decision": decision,
        "rule": outcome.rule if outcome else None,
        "reason": (outcome.reason or None) if outcome else None,
        "error": bool(outcome and outcome.error),
        "changed": decision != _AS_DECISION[actual],
    }


_AS_DECISION: dict[str, Decision] = {"admitted": "admit", "deferred": "defer"}


def _actual(stored: Stored) -> Literal["admitted", "deferred"]:
    """What the join decided when it was made: a machine without a request was admitted at once,
    and so was one whose request a policy rule approved (stored consumed, decided by the policy);
    any other request is a deferred join, whatever became of it since."""
    if stored.request is not None:
        return "admitted" if stored.request.decided_by == join_decide.POLICY else "deferred"
    assert stored.machine is not None
    return "deferred" if stored.machine.request_id else "admitted"


def counts(items: list[policy_views.SimulatedJoin]) -> policy_views.SimulationCounts:
    def count(**wanted: object) -> int:
        return sum(all(item.get(k) == v for k, v in wanted.items()) for item in items)

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
