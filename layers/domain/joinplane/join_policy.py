"""A fresh join's outcome under its pool's join policy (docs/policy.md): the activation built from
what the join read, the policy evaluated, and `join_decide.apply_policy` over the attestors'
outcome. Loaded by `joinplane.join` only for a pool that has a policy, and loads the engine
(`joinplane.policy`) only then: a join to a pool without one imports neither.
"""

from __future__ import annotations

from joinplane import attestors, clock, join_decide, join_facts, machines, observe, policy
from joinplane.attestors import Vote
from joinplane.dal import pools as pools_db
from joinplane.dal.machines import TpmFactsRecord
from joinplane.dal.pools import PoolRecord
from joinplane.join_decide import Admit, Decided, Defer, Refuse
from joinplane.join_facts import Attempt


def decide(
    attempt: Attempt,
    decided: Decided | Refuse,
    pool: PoolRecord,
    votes: list[Vote],
    facts: attestors.Facts,
    tpm: TpmFactsRecord,
) -> Decided | Refuse:
    """The pool's policy over the attestors' outcome `decided` of this join, which `votes` are
    (an attestor's deny stands: a policy never admits what an attestor denied). The policy came
    with the pool the join read: evaluating it reads nothing more, but to confirm a deny."""
    if not isinstance(decided, Admit | Defer):
        return decided
    outcome = _outcome(attempt, pool, votes, facts, tpm)
    if outcome is not None and outcome.decision == "deny":
        # A deny writes nothing, so no transaction checks the pool's version as an admission's or a
        # deferral's does: the rule that denies must be the stored policy's, not a warm
        # container's copy of one an operator has since changed (one GetItem, on denials only).
        current = pools_db.cached(pool.tenant_id, pool.pool_id, fresh=True)
        if current is not None and current.version != pool.version and current.active:
            outcome = _outcome(attempt, current, votes, facts, tpm)
    if outcome is not None:
        observe.note(policyRule=outcome.rule, policyDecision=outcome.decision)
    return join_decide.apply_policy(decided, outcome, pool.approvals_required)


def _outcome(
    attempt: Attempt, pool: PoolRecord, votes: list[Vote], facts: attestors.Facts, tpm: TpmFactsRecord
) -> policy.PolicyOutcome | None:
    if not pool.join_policy:
        return None
    activation = policy.variables(
        machines.facts_of(attempt.request)._replace(tpm=tpm, aws=join_facts.aws_facts(attempt)),
        token=attempt.token,
        verdicts=attestors.verdicts(votes),
        reasons=votes,
        site_id=attempt.token.site_id,
        discovery=policy.DiscoveryEntry(*facts.discovery_entry) if facts.discovery_entry else None,
        now=clock.now(),
    )
    return policy.outcome_of(pool.join_policy, activation)
