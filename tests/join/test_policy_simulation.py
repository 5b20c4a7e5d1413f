"""pools/simulatePolicy: a draft join policy run over the pool's stored joins says what the join would
decide for each, and its counts are what the same rules do once saved; it reads, never writes."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from tests.support import Reply, call, join
from tests.support.table import all_items

SIMULATE = "/api/compute/pools/simulatePolicy"

# One rule of each decision, and one whose evaluation fails (an integer divided by zero).
DRAFT = [
    {
        "name": "gpu-rack",
        "when": 'request.hostname.startsWith("gpu-")',
        "decision": "approve",
        "reason": "rack 7",
    },
    {
        "name": "no-rogues",
        "when": 'request.hostname.startsWith("rogue-")',
        "decision": "deny",
        "reason": "rogue",
    },
    {
        "name": "lab-by-hand",
        "when": 'request.hostname.startsWith("lab-")',
        "decision": "defer",
        "reason": "lab",
    },
    {
        "name": "broken",
        "when": 'request.hostname.startsWith("err-") && 1 / (request.gpuCount - request.gpuCount) > 0',
        "decision": "approve",
        "reason": "never",
    },
]
# (hostname, token): `approval` defers every join (the token's attestor), `plain` admits them all.
MACHINES = [
    ("gpu-01", "approval"),
    ("gpu-02", "approval"),
    ("rogue-1", "approval"),
    ("lab-1", "approval"),
    ("err-1", "approval"),
    ("other-1", "approval"),
    ("gpu-03", "plain"),
    ("rogue-2", "plain"),
    ("lab-2", "plain"),
    ("err-2", "plain"),
    ("other-2", "plain"),
]
OUTCOME = {200: "admit", 202: "defer", 403: "deny"}


def _body(token: str, hostname: str) -> dict[str, Any]:
    """A machine's join as a key never seen before (a fresh fingerprint)."""
    return {
        "joinToken": token,
        "machineFingerprint": f"fp-{uuid.uuid4().hex}",
        "hostname": hostname,
        "gpuCount": 8,
    }


class Joined:
    """A machine that joined: the key it joined as (a fingerprint) and the join's reply."""

    def __init__(self, token: str, hostname: str) -> None:
        self.body = _body(token, hostname)
        self.reply: Reply = join(self.body)

    @property
    def outcome(self) -> str:
        return OUTCOME[self.reply.status]


def _join_all(tokens: dict[str, str]) -> dict[str, Joined]:
    """Each machine joins once, as a key never seen before."""
    return {hostname: Joined(tokens[kind], hostname) for hostname, kind in MACHINES}


def _simulate(key: str, **body: Any) -> Reply:
    return call(SIMULATE, {"tenantId": "acme", "poolId": "gpu", "joinPolicy": DRAFT, **body}, key)


def _decide(verb: str, request_id: str, key: str) -> None:
    decided = call(
        f"/api/compute/joinRequests/{verb}",
        {"tenantId": "acme", "poolId": "gpu", "requestId": request_id, "reason": "checked"},
        key,
    )
    assert decided.status == 200, decided.body


def test_the_simulations_counts_are_what_the_rules_do_once_switched_on(make_token, admin_key) -> None:
    # Given a pool without a policy, where six machines were deferred (their token requires approval)
    # and five admitted; since, one deferral was approved and its machine joined, one was rejected
    tokens = {
        "approval": make_token(requireApproval=True, maxUses=30)["token"],
        "plain": make_token(maxUses=30)["token"],
    }
    joined = _join_all(tokens)
    assert Counter(j.outcome for j in joined.values()) == {"defer": 6, "admit": 5}
    approved, rejected = (joined[h].reply.body["joinRequest"]["requestId"] for h in ("gpu-02", "other-1"))
    _decide("approve", approved, admin_key)
    _decide("reject", rejected, admin_key)
    assert join(joined["gpu-02"].body).status == 200
    stored = all_items()

    # When the draft is simulated
    simulated = _simulate(admin_key)

    # Then it writes nothing (so publishes nothing: every event is derived from a write)
    assert all_items() == stored
    assert simulated.status == 200, simulated.body
    # And it shows each join once, newest first, a request that became a machine as the request
    items = simulated.body["items"]
    assert [i["hostname"] for i in items] == [hostname for hostname, _ in reversed(MACHINES)]
    by_host = {i["hostname"]: i for i in items}
    assert by_host["gpu-02"]["kind"] == "request" and by_host["gpu-02"]["id"] == approved
    assert by_host["gpu-02"]["state"] == "consumed" and by_host["gpu-02"]["machineId"]
    assert (by_host["other-1"]["state"], by_host["other-1"]["actual"]) == ("rejected", "deferred")
    assert (by_host["other-2"]["kind"], by_host["other-2"]["actual"]) == ("join", "admitted")
    # And what each rule would do to each join, and whether that changes what happened
    assert {h: (i["decision"], i["rule"], i["changed"]) for h, i in by_host.items()} == {
        "gpu-01": ("admit", "gpu-rack", True),
        "gpu-02": ("admit", "gpu-rack", True),
        "rogue-1": ("deny", "no-rogues", True),
        "lab-1": ("defer", "lab-by-hand", False),
        "err-1": ("defer", "broken", False),
        "other-1": ("defer", None, False),
        "gpu-03": ("admit", "gpu-rack", False),
        "rogue-2": ("deny", "no-rogues", True),
        "lab-2": ("defer", "lab-by-hand", True),
        "err-2": ("defer", "broken", True),
        "other-2": ("admit", None, False),
    }
    assert by_host["err-1"]["error"] and by_host["err-1"]["reason"]
    assert (by_host["gpu-01"]["error"], by_host["gpu-01"]["reason"]) == (False, "rack 7")
    assert simulated.body["counts"] == {
        "total": 11,
        "wouldAdmit": 4,
        "wouldDefer": 5,
        "wouldDeny": 2,
        "unchanged": 5,
        "changed": 6,
        "deferredWouldAdmit": 2,
        "deferredWouldDeny": 1,
        "admittedWouldDefer": 2,
        "admittedWouldDeny": 1,
        "noMatch": 2,
        "errors": 2,
    }
    assert simulated.body["complete"] is True

    # When the draft is saved as the pool's policy and the same machines join again, as new keys
    saved = call(
        "/api/compute/pools/update", {"tenantId": "acme", "poolId": "gpu", "joinPolicy": DRAFT}, admin_key
    )
    assert saved.status == 200, saved.body
    again = _join_all(tokens)

    # Then each is decided as the simulation said, and the counts are the same
    assert {h: j.outcome for h, j in again.items()} == {h: i["decision"] for h, i in by_host.items()}
    counts = simulated.body["counts"]
    assert Counter(j.outcome for j in again.values()) == {
        "admit": counts["wouldAdmit"],
        "defer": counts["wouldDefer"],
        "deny": counts["wouldDeny"],
    }


def _key(admin_key: str, *grants: str, tenant: str = "acme") -> str:
    created = call("/api/compute/apiKeys/create", {"tenantId": tenant, "grants": list(grants)}, admin_key)
    assert created.status == 200, created.body
    return str(created.body["key"])


def test_a_rule_on_the_sites_inventory_is_simulated_as_the_join_looks_the_machine_up(
    pool, make_token, admin_key
) -> None:
    # Given a site whose inventory lists one machine by its MAC, and a token that looks joins up in it
    listed = {"tenantId": "acme", "siteId": "rack-1", "macAddresses": ["02:00:00:00:07:01"], "hostname": "n1"}
    assert call("/api/compute/discovery/register", listed, admin_key).status == 200
    token = make_token(maxUses=10, attestation={"discovery": "defer-unknown"})["token"]

    def join_all() -> dict[str, str]:
        outcomes = {}
        for hostname, mac in (("n1", "02:00:00:00:07:01"), ("stranger", "02:00:00:00:07:02")):
            machine = _body(token, hostname) | {"hardware": {"macAddresses": [mac]}}
            outcomes[hostname] = OUTCOME[join(machine).status]
        return outcomes

    assert join_all() == {"n1": "admit", "stranger": "defer"}
    draft = [
        {
            "name": "listed",
            "when": "site.discovery != null && site.discovery.hostname == 'n1'",
            "decision": "approve",
        },
        {"name": "strangers", "when": "site.discovery == null", "decision": "deny"},
    ]
    # When a draft that reads the site's inventory is simulated, then saved and the machines join again
    simulated = _simulate(admin_key, joinPolicy=draft)
    saved = call(
        "/api/compute/pools/update", {"tenantId": "acme", "poolId": "gpu", "joinPolicy": draft}, admin_key
    )
    assert (simulated.status, saved.status) == (200, 200), (simulated.body, saved.body)
    # Then each join is decided as the simulation said
    said = {i["hostname"]: (i["decision"], i["rule"]) for i in simulated.body["items"]}
    assert said == {"n1": ("admit", "listed"), "stranger": ("deny", "strangers")}
    assert join_all() == {h: decision for h, (decision, _) in said.items()}


def test_a_key_sees_only_the_pools_it_may_read_and_must_read_their_requests_and_machines(
    pool, other_pool, admin_key
) -> None:
    # Given keys limited to the other pool, to another tenant, and to the pool without its machines
    keys = {
        "other pool": _key(admin_key, "compute:*@compute-pool/cpu"),
        "other tenant": _key(admin_key, "compute:*@tenant", tenant="globex"),
        "no machines": _key(admin_key, "compute:pools:read@tenant", "compute:join-tokens:read@tenant"),
        "reader": _key(
            admin_key,
            "compute:pools:read@tenant",
            "compute:join-tokens:read@tenant",
            "compute:machines:read@tenant",
        ),
    }
    # When each simulates a draft over pool gpu of tenant acme, and gets the pool
    simulated = {name: _simulate(key) for name, key in keys.items()}
    got = {
        name: call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "gpu"}, key)
        for name, key in keys.items()
    }
    absent = _simulate(keys["reader"], poolId="nope")
    # Then a pool out of the key's sight is refused as pools/get refuses it (not found for another
    # pool's key, as an absent pool is), a key that cannot read its machines is refused, and a key
    # that reads the pool, its requests and its machines gets the simulation
    for name in ("other pool", "other tenant"):
        assert (simulated[name].status, simulated[name].body) == (got[name].status, got[name].body), name
    assert (simulated["other pool"].status, simulated["other pool"].code) == (404, "NOT_FOUND")
    assert (absent.status, absent.body) == (404, simulated["other pool"].body)
    assert (simulated["no machines"].status, simulated["no machines"].code) == (403, "PERMISSION_DENIED")
    assert "compute:machines:read" in simulated["no machines"].body["error"]["message"]
    assert simulated["reader"].status == 200, simulated["reader"].body
    assert simulated["reader"].body["items"] == []


def test_an_invalid_draft_is_refused_with_its_position_as_pools_update_refuses_it(pool, admin_key) -> None:
    # Given a draft whose second rule does not parse
    draft = [DRAFT[0], {"name": "typo", "when": 'request.hostname.startsWith("gpu-"', "decision": "approve"}]
    body = {"tenantId": "acme", "poolId": "gpu", "joinPolicy": draft}
    stored = all_items()
    # When it is simulated, and saved
    simulated = call(SIMULATE, body, admin_key)
    saved = call("/api/compute/pools/update", body, admin_key)
    # Then both refuse it with the same error, naming the rule and where it fails, and nothing changed
    assert (simulated.status, simulated.code) == (400, "INVALID_ARGUMENT")
    assert simulated.body == saved.body
    assert "typo" in simulated.body["error"]["message"]
    assert all_items() == stored


def test_the_work_is_bounded_by_the_limit_and_the_rules_count(
    pool, make_token, admin_key, monkeypatch
) -> None:
    # Given a pool with three admitted machines and two deferred joins, the first of which was
    # approved and became the pool's newest machine
    plain, approval = make_token(maxUses=5)["token"], make_token(requireApproval=True, maxUses=5)["token"]
    for n in range(3):
        Joined(plain, f"cpu-{n}")
    first, _ = Joined(approval, "gpu-0"), Joined(approval, "gpu-1")
    _decide("approve", first.reply.body["joinRequest"]["requestId"], admin_key)
    assert join(first.body).status == 200

    # When it is simulated with a limit of one, and with more items or rules than allowed
    one = _simulate(admin_key, limit=1)
    too_many_items = _simulate(admin_key, limit=201)
    too_many_rules = _simulate(
        admin_key, joinPolicy=[{"name": f"r{n}", "when": "true", "decision": "defer"} for n in range(33)]
    )
    unknown = _simulate(admin_key, since="yesterday")

    # Then only the newest request and the newest machine are simulated, the machine as the request
    # it was approved from, and the answer says older joins exist
    assert one.status == 200, one.body
    assert [(i["hostname"], i["kind"], i["state"]) for i in one.body["items"]] == [
        ("gpu-1", "request", "pending"),
        ("gpu-0", "request", "consumed"),
    ]
    assert (one.body["limit"], one.body["complete"]) == (1, False)
    # And the rest are refused as bad input
    for refused in (too_many_items, too_many_rules, unknown):
        assert (refused.status, refused.code) == (400, "INVALID_ARGUMENT"), refused.body

    # When a call has no time left to decide joins
    monkeypatch.setattr("joinplane.policy_simulation.BUDGET_SECONDS", -1.0)
    out_of_time = _simulate(admin_key)
    # Then it answers with what it decided, nothing here, and says the joins left were not simulated
    assert out_of_time.status == 200, out_of_time.body
    assert (out_of_time.body["items"], out_of_time.body["complete"]) == ([], False)
    assert out_of_time.body["counts"]["total"] == 0


def test_a_draft_reading_the_sites_inventory_needs_the_key_to_read_that_inventory(pool, admin_key) -> None:
    # Given a key that reads the pool, its requests and machines but not its site's discovery
    # inventory (discovery/list refuses it), and a key that also reads the inventory
    pool_key = _key(admin_key, "compute:*@compute-pool/gpu")
    site_key = _key(admin_key, "compute:*@compute-pool/gpu", "compute:discovery:read@site/rack-1")
    listing = call("/api/compute/discovery/list", {"tenantId": "acme", "siteId": "rack-1"}, pool_key)
    assert listing.status in (403, 404)
    probe = "site.discovery != null && site.discovery.hostname < 'm'"
    oracle = [{"name": "probe", "when": probe, "decision": "deny"}]
    # When each simulates a draft whose outcome depends on an inventory entry's hostname
    refused, allowed = _simulate(pool_key, joinPolicy=oracle), _simulate(site_key, joinPolicy=oracle)
    # Then the pool's key is refused naming the permission (else each join's decision would tell it,
    # bit by bit, what the inventory holds), and the key that reads the inventory gets the simulation
    assert (refused.status, refused.code) == (403, "PERMISSION_DENIED"), refused.body
    assert "compute:discovery:read" in refused.body["error"]["message"]
    assert allowed.status == 200, allowed.body
    # And a draft that does not read the site needs no such permission
    assert _simulate(pool_key).status == 200
