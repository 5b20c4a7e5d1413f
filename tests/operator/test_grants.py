import pytest

from joinplane.errors import InvalidArgument, NotFound, PermissionDenied
from joinplane.grants import Grant, Principal, Resource, permission_covers, scope_contains


def principal(*grants: str, tenant: str = "acme") -> Principal:
    return Principal("key_x", tenant, tuple(Grant.parse(g) for g in grants))


POOL_A = Resource("acme", "site-1", "a", kind="pool")
POOL_B = Resource("acme", "site-2", "b", kind="pool")


@pytest.mark.parametrize(
    ("held", "wanted", "covered"),
    [
        ("compute:join-tokens:read", "compute:join-tokens:read", True),
        ("compute:join-tokens:*", "compute:join-tokens:read", True),
        ("compute:*:read", "compute:pools:read", True),
        ("compute:*:read", "compute:pools:write", False),
        ("compute:*", "compute:join-tokens:create", True),
        ("*", "iam:api-keys:write", True),
        ("compute:pools:read", "compute:pools", False),
        ("compute:pools", "compute:pools:read", False),
        ("compute:join-tokens:read", "compute:join-tokens:create", False),
        ("compute:pools:read", "compute:*:read", False),
    ],
)
def test_permission_patterns(held: str, wanted: str, covered: bool) -> None:
    assert permission_covers(held, wanted) is covered


@pytest.mark.parametrize(
    "text",
    [
        "compute:pools:read",
        "x@",
        "@tenant",
        "compute:pools:read@site",
        "READ@tenant",
        "a@compute-pool/",
        "a@compute-pool/-x",
        "a@galaxy",
        "a:b@tenant extra",
    ],
)
def test_malformed_grants_are_invalid_argument(text: str) -> None:
    with pytest.raises(InvalidArgument):
        Grant.parse(text)


def test_pool_grant_reaches_only_its_pool() -> None:
    # Given a key with only a read grant on pool a
    key = principal("compute:join-tokens:read@compute-pool/a")
    # Then it sees pool a, not pool b, and cannot create tokens on a
    assert key.sees(POOL_A) and not key.sees(POOL_B)
    assert key.can("compute:join-tokens:read", POOL_A)
    assert not key.can("compute:join-tokens:create", POOL_A)
    with pytest.raises(NotFound):
        key.authorize("compute:join-tokens:read", POOL_B)
    with pytest.raises(PermissionDenied):
        key.authorize("compute:join-tokens:create", POOL_A)


def test_site_grant_reaches_the_sites_pools_and_the_site() -> None:
    key = principal("compute:*@site/site-1")
    assert key.can("compute:pools:read", POOL_A)
    assert key.can("compute:join-tokens:create", Resource("acme", "site-1", kind="site"))
    assert not key.sees(POOL_B)


def test_another_tenant_is_permission_denied_unless_platform() -> None:
    key = principal("*@tenant")
    with pytest.raises(PermissionDenied):
        key.authorize("compute:pools:read", Resource("globex", "s", "p"))
    admin = principal("*@platform")
    admin.authorize("compute:pools:read", Resource("globex", "s", "p"))


def test_compute_pool_wildcard_does_not_reach_tenant_level_resources() -> None:
    key = principal("iam:*@compute-pool/*")
    assert not key.sees(Resource("acme", kind="tenant"))
    assert key.sees(POOL_B)


@pytest.mark.parametrize(
    ("held", "wanted", "allowed"),
    [
        ("*@tenant", "compute:pools:read@compute-pool/a", True),
        ("*@tenant", "compute:pools:read@platform", False),
        ("compute:*@compute-pool/*", "compute:pools:read@compute-pool/a", True),
        ("compute:*@compute-pool/a", "compute:pools:read@compute-pool/b", False),
        ("compute:pools:read@tenant", "compute:pools:write@tenant", False),
        ("compute:*@site/s1", "compute:pools:read@site/s1", True),
        ("compute:*@site/s1", "compute:pools:read@tenant", False),
        ("*@platform", "*@platform", True),
    ],
)
def test_a_key_hands_out_only_what_it_holds(held: str, wanted: str, allowed: bool) -> None:
    assert principal(held).may_grant(Grant.parse(wanted), "acme") is allowed


def test_scope_containment_is_not_symmetric() -> None:
    assert scope_contains("tenant", "site/x") and not scope_contains("site/x", "tenant")


@pytest.mark.parametrize(
    ("held", "wanted", "allowed"),
    [
        ("compute:*@tenant", "compute:*@tenant", False),
        ("compute:*@site/s1", "compute:pools:read@site/s1", False),
        ("compute:*@compute-pool/*", "compute:pools:read@compute-pool/p", False),
        ("compute:*@platform", "compute:pools:read@tenant", True),
    ],
)
def test_only_platform_grants_reach_another_tenants_new_keys(held: str, wanted: str, allowed: bool) -> None:
    # A grant's scope is relative to its holder's tenant: acme's `@tenant` says nothing about globex
    assert principal(held).may_grant(Grant.parse(wanted), "globex") is allowed
