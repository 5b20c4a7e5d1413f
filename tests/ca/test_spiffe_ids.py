"""Every machine's SPIFFE ID is one the SPIFFE ID standard accepts, and no two
tenant/pool ids the API accepts share one.

`spiffe_id_problem` below is a strict SPIFFE ID parser written from the standard's rules (SPIFFE-ID.md
§2: scheme, trust domain, path, length), independent of joinplane.spiffe; every produced ID goes
through it."""

from __future__ import annotations

import itertools
import random
import re
import string
import tomllib
from urllib.parse import urlsplit

import pytest
from cryptography import x509

from joinplane import ca, csr_checks, machine_certificates, spiffe
from joinplane.dal import authorities as authorities_db
from joinplane.errors import Internal
from joinplane.settings import Settings
from joinplane_local.template import ROOT, Template, load
from tests.support.csr import Csrs, OpensslTool

DEFAULT_TRUST_DOMAIN = "joinplane.internal"
TENANT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
POOL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
ID_CHARACTERS = string.ascii_letters + string.digits + "._:-"


# --- a SPIFFE ID parser, from the standard -----------------------------------------------------

_TRUST_DOMAIN_CHARACTERS = re.compile(r"[a-z0-9._-]+")
_SEGMENT_CHARACTERS = re.compile(r"[A-Za-z0-9._-]+")


def segment_problem(segment: str) -> str | None:
    if segment == "":
        return "empty path segment"
    if segment in (".", ".."):
        return f"dot segment {segment!r}"
    if not _SEGMENT_CHARACTERS.fullmatch(segment):
        return f"path segment {segment!r} has a character outside [A-Za-z0-9._-]"
    return None


def spiffe_id_problem(uri: str) -> str | None:
    """None when `uri` is a valid SPIFFE ID, else what is wrong with it."""
    if not uri.isascii():
        return "not ASCII"
    if len(uri.encode()) > 2048:
        return "longer than 2048 bytes"
    if not uri.startswith("spiffe://"):
        return "scheme is not spiffe"
    trust_domain, slash, path = uri[len("spiffe://") :].partition("/")
    if trust_domain == "":
        return "no trust domain"
    if len(trust_domain) > 255:
        return "trust domain longer than 255"
    # [a-z0-9._-] alone keeps out a port (':'), userinfo ('@'), capitals, '%', '?' and '#'.
    if not _TRUST_DOMAIN_CHARACTERS.fullmatch(trust_domain):
        return f"trust domain {trust_domain!r} has a character outside [a-z0-9._-]"
    if slash:
        if path == "":
            return "trailing slash"
        for segment in path.split("/"):
            problem = segment_problem(segment)
            if problem:
                return "trailing slash" if segment == "" and path.endswith("/") else problem
    # And a generic RFC 3986 reader sees the same parts: host only, no query, no fragment.
    parts = urlsplit(uri)
    assert (parts.scheme, parts.netloc, parts.hostname, parts.port) == (
        "spiffe",
        trust_domain,
        trust_domain,
        None,
    )
    assert (parts.query, parts.fragment, parts.path) == ("", "", slash + path)
    return None


def assert_valid(uri: str) -> None:
    assert spiffe_id_problem(uri) is None, f"{uri}: {spiffe_id_problem(uri)}"


def path_segments(uri: str) -> list[str]:
    return uri[len("spiffe://") :].split("/")[1:]


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("spiffe://Evil:8443/pool/P:1/machine/mach_01", "trust domain"),
        ("spiffe://acme/pool/P:1/machine/mach_01", "P:1"),
        ("spiffe://Example.org/a", "trust domain"),
        ("spiffe://user@example.org/a", "trust domain"),
        ("spiffe://example.org:443/a", "trust domain"),
        ("spiffe://example.org/a?x=1", "outside"),
        ("spiffe://example.org/a#frag", "outside"),
        ("spiffe://example.org/a%3Ab", "outside"),
        ("spiffe://example.org/a//b", "empty"),
        ("spiffe://example.org/a/./b", "dot segment"),
        ("spiffe://example.org/a/..", "dot segment"),
        ("spiffe://example.org/a/", "trailing slash"),
        ("spiffe://example.org/", "trailing slash"),
        ("spiffe:///a", "no trust domain"),
        ("SPIFFE://example.org/a", "scheme"),
        ("https://example.org/a", "scheme"),
        ("spiffe://example.org/" + "a" * 2028, "2048"),
        ("spiffe://" + "a" * 256 + "/a", "255"),
        ("spiffe://example.org/caf\u00e9", "ASCII"),
    ],
)
def test_the_parser_refuses_what_the_standard_refuses(uri: str, problem: str) -> None:
    # Given a URI the SPIFFE ID standard refuses (the first is what Joinplane used to issue)
    # When the test's parser reads it
    found = spiffe_id_problem(uri)
    # Then it says why
    assert found is not None and problem in found


@pytest.mark.parametrize(
    "uri",
    [
        "spiffe://example.org",
        "spiffe://example.org/a",
        "spiffe://a_b-c.d/A/b.c/_-./...",
        "spiffe://example.org/" + "a" * 2027,
    ],
)
def test_the_parser_accepts_what_the_standard_accepts(uri: str) -> None:
    assert_valid(uri)


# --- certificates, as a machine receives them --------------------------------------------------


@pytest.mark.usefixtures("table")
def test_a_tenant_with_a_port_and_capitals_gets_a_valid_spiffe_id(csrs: Csrs, ossl: OpensslTool) -> None:
    # Given tenant `Evil:8443` (a host with a port, once) and pool `P:1`, both ids the API accepts
    tenant, pool = "Evil:8443", "P:1"
    assert TENANT_ID.fullmatch(tenant) and POOL_ID.fullmatch(pool)
    # When a machine of theirs gets its certificate
    issued = machine_certificates.issue_machine_certificate(
        tenant_id=tenant,
        site_id="s1",
        pool_id=pool,
        machine_id="mach_01",
        csr=csr_checks.parse_csr(csrs["p256"].pem),
        lifetime_seconds=3600,
    )
    # Then its one URI SAN is a valid SPIFFE ID: the deployment's trust domain, the tenant in the path
    cert = x509.load_pem_x509_certificate(issued.certificate_pem.encode())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    uris = [str(name.value) for name in san]
    assert uris == ["spiffe://joinplane.internal/tenant/Evil_3a8443/pool/P_3a1/machine/mach_01"]
    assert_valid(uris[0])
    # And it reads back as the tenant and pool it was issued to
    assert [spiffe.id_from_segment(s) for s in path_segments(uris[0])[1:4:2]] == [tenant, pool]
    # And openssl shows the same
    assert f"URI:{uris[0]}" in ossl.text(issued.certificate_pem)


@pytest.mark.usefixtures("table")
def test_the_trust_domain_is_the_deployments(csrs: Csrs, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a deployment whose SpiffeTrustDomain is prod.joinplane.example.com
    monkeypatch.setenv("SPIFFE_TRUST_DOMAIN", "prod.joinplane.example.com")
    # When a machine gets its certificate
    issued = machine_certificates.issue_machine_certificate(
        tenant_id="acme",
        site_id="s1",
        pool_id="gpu-east",
        machine_id="mach_01",
        csr=csr_checks.parse_csr(csrs["p256"].pem),
        lifetime_seconds=3600,
    )
    # Then its SPIFFE ID is in that trust domain
    cert = x509.load_pem_x509_certificate(issued.certificate_pem.encode())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(n.value) for n in san] == [
        "spiffe://prod.joinplane.example.com/tenant/acme/pool/gpu-east/machine/mach_01"
    ]


@pytest.mark.parametrize(
    "trust_domain", ["Joinplane.Internal", "joinplane.internal:8443", "ops@joinplane.internal", "", "a" * 256]
)
def test_an_unusable_trust_domain_fails_issuance_and_creates_no_ca(
    table: str, csrs: Csrs, monkeypatch: pytest.MonkeyPatch, trust_domain: str
) -> None:
    # Given a deployment whose SPIFFE_TRUST_DOMAIN was set by hand to something SPIFFE refuses
    monkeypatch.setenv("SPIFFE_TRUST_DOMAIN", trust_domain)
    # When a machine asks for its certificate
    with pytest.raises(Internal, match="SPIFFE_TRUST_DOMAIN"):
        machine_certificates.issue_machine_certificate(
            tenant_id="acme",
            site_id="s1",
            pool_id="gpu-east",
            machine_id="mach_01",
            csr=csr_checks.parse_csr(csrs["p256"].pem),
            lifetime_seconds=3600,
        )
    # Then nothing was created: the pool has no CA
    assert authorities_db.get_pointer("acme", "gpu-east") is None


# --- every id the API accepts: valid, reversible, distinct -------------------------------------


def small_ids() -> list[str]:
    """Every id up to 4 characters over the characters that matter (case, ':' against '.', the escape
    '_' and its hex digits), and every id up to 2 characters over the whole alphabet."""
    tricky = "aA3._:-"
    ids = {"".join(p) for n in range(1, 5) for p in itertools.product(tricky, repeat=n)}
    ids |= {"".join(p) for n in (1, 2) for p in itertools.product(ID_CHARACTERS, repeat=n)}
    return sorted(ids)


def random_ids(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    weighted = ID_CHARACTERS + ":._-" * 8 + "aAfF53e2"  # escapes and look-alikes, often
    ids = []
    for _ in range(count):
        length = rng.choice([rng.randint(1, 8), rng.randint(1, 128), 128])
        ids.append("".join(rng.choice(weighted) for _ in range(length)))
    return ids


def look_alikes(base: str) -> set[str]:
    """Every id that differs from `base` only in the case of letters or in ':' against '.'."""
    choices = [{c.lower(), c.upper()} if c.isalpha() else {":", "."} if c in ":." else {c} for c in base]
    return {"".join(p) for p in itertools.product(*choices)}


def test_every_tenant_or_pool_id_maps_to_one_valid_segment_that_reads_back() -> None:
    # Given every short id over the tricky characters and thousands of long random ones
    ids = small_ids() + random_ids(20_000, seed=9)
    assert all(TENANT_ID.fullmatch(i) for i in ids)
    # When each becomes a path segment
    segments = {i: spiffe.segment(i) for i in ids}
    # Then every segment is valid, reads back as its id, and no two ids share one
    for id_, seg in segments.items():
        assert segment_problem(seg) is None, (id_, seg, segment_problem(seg))
        assert spiffe.id_from_segment(seg) == id_
    assert len(set(segments.values())) == len(segments)


@pytest.mark.parametrize("base", ["a:b.c", "Acme:Prod.1", "x.y:z", "gpu:east.A", "_3a:", ".:._", "..", "."])
def test_ids_differing_only_in_case_or_colon_against_dot_get_different_spiffe_ids(base: str) -> None:
    # Given every id that differs from another only in letter case or ':' against '.'
    family = sorted(look_alikes(base))
    assert len(family) > 1
    # When each is a tenant (and, where a pool id may be, a pool) of a machine
    tenant_uris = {t: ca.spiffe_id(t, "pool", "mach_01") for t in family}
    pool_uris = {p: ca.spiffe_id("acme", p, "mach_01") for p in family if POOL_ID.fullmatch(p)}
    # Then every SPIFFE ID is valid and no two are the same
    for uris in (tenant_uris, pool_uris):
        for uri in uris.values():
            assert_valid(uri)
        assert len(set(uris.values())) == len(uris)


def test_tenant_pool_pairs_never_share_a_spiffe_id() -> None:
    # Given many tenant/pool pairs, including pairs that would run together without a separator
    rng = random.Random(3)
    tenants = ["a", "a:b", "a.b", "A", "tenant", "pool", "_", ".", "..", *random_ids(300, seed=4)]
    pools = [
        p
        for p in ["b", "b:c", "pool", "tenant", "a", "P:1", *random_ids(300, seed=5)]
        if POOL_ID.fullmatch(p)
    ]
    pairs = {(rng.choice(tenants), rng.choice(pools)) for _ in range(5_000)}
    pairs |= {(t, p) for t in tenants[:9] for p in pools[:6]}
    # When each gets a SPIFFE ID
    uris = {pair: ca.spiffe_id(*pair, "mach_01") for pair in pairs}
    # Then every ID is valid, has exactly the fixed shape, reads back as its pair, and none repeats
    for (tenant, pool), uri in uris.items():
        assert_valid(uri)
        segments = path_segments(uri)
        assert segments[0::2] == ["tenant", "pool", "machine"] and segments[-1] == "mach_01"
        assert (spiffe.id_from_segment(segments[1]), spiffe.id_from_segment(segments[3])) == (tenant, pool)
    assert len(set(uris.values())) == len(uris)


def test_the_longest_ids_in_the_longest_trust_domain_stay_within_2048_bytes() -> None:
    # Given the longest ids, all escapes, and a 255-character trust domain
    uri = spiffe.for_machine("a" * 255, ":" * 128, "P" + "_" * 127, "m" * 64)
    # Then the ID is valid (1129 bytes: the bound is far off)
    assert_valid(uri)
    assert (
        len(uri) == 9 + 255 + len("/tenant/") + 3 * 128 + len("/pool/") + 1 + 3 * 127 + len("/machine/") + 64
    )


@pytest.mark.parametrize(
    "segment", ["a_2e", "_3A", "a_", "_zz", "_", "a_5", ".", "..", "a/b", "", "a:b", "_41"]
)
def test_a_segment_no_id_writes_reads_as_no_id(segment: str) -> None:
    # Given a segment that segment() never writes (non-canonical escapes, stray '_', bad characters)
    # When it is read back, Then it is refused rather than read as some id
    with pytest.raises(ValueError):
        spiffe.id_from_segment(segment)


@pytest.mark.parametrize("bad", ["", "a/b", "a" * 129, "é", "a b", "a%3a"])
def test_segment_refuses_what_the_api_would(bad: str) -> None:
    with pytest.raises(ValueError):
        spiffe.segment(bad)


# --- the trust domain is a deployment setting --------------------------------------------------


def test_template_settings_local_runtime_and_samconfig_agree_on_the_trust_domain() -> None:
    # Given the template
    document = load()
    parameter = document["Parameters"]["SpiffeTrustDomain"]
    # Then its parameter has the settings' default and the standard's pattern, and reaches every function
    assert parameter["Default"] == Settings(table_name="t").spiffe_trust_domain == DEFAULT_TRUST_DOMAIN
    env = document["Globals"]["Function"]["Environment"]["Variables"]
    assert env["SPIFFE_TRUST_DOMAIN"] == {"Ref": "SpiffeTrustDomain"}
    pattern = re.compile(parameter["AllowedPattern"])
    for candidate in ["joinplane.internal", "a", "x_y-z.0", "Joinplane.internal", "a:1", "a@b", "a/b", ""]:
        cfn_accepts = bool(pattern.fullmatch(candidate)) and parameter["MinLength"] <= len(candidate)
        assert cfn_accepts == bool(spiffe.TRUST_DOMAIN.fullmatch(candidate)), candidate
    assert parameter["MaxLength"] == 255
    # And the local runtime, which runs the template's defaults, has one
    assert Template(load()).function_environment()["SPIFFE_TRUST_DOMAIN"] == DEFAULT_TRUST_DOMAIN
    # And each samconfig environment names a valid one of its own
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    chosen = []
    for environment in ("default", "prod"):
        overrides = config[environment]["deploy"]["parameters"]["parameter_overrides"]
        value = dict(o.split("=", 1) for o in overrides.split())["SpiffeTrustDomain"]
        assert pattern.fullmatch(value), value
        chosen.append(value)
    assert len(set(chosen)) == len(chosen)
