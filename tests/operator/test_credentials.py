import re

import pytest

from joinplane import credentials, ids


def test_secrets_carry_160_random_bits_and_a_prefix() -> None:
    # Given many minted secrets for one record
    ulid = ids.new_ulid()
    minted = {credentials.mint("jpk", ulid) for _ in range(200)}
    # Then all differ, and each has the prefix, the record's ulid and 32 base32 characters (160 bits)
    assert len(minted) == 200
    for secret in minted:
        assert re.fullmatch(rf"jpk_{ulid}_[0-9a-hjkmnp-tv-z]{{32}}", secret)


def test_parse_accepts_only_our_shape() -> None:
    secret = credentials.mint("jpt", ids.new_ulid())
    parsed = credentials.parse(secret, "jpt")
    assert parsed is not None and parsed.secret == secret
    assert credentials.parse(secret, "jpk") is None
    assert credentials.parse(secret + "x", "jpt") is None
    assert credentials.parse(secret.upper(), "jpt") is None
    assert credentials.parse("jpt_" + "o" * 26 + "_" + "a" * 32, "jpt") is None  # 'o' is not Crockford


def test_only_the_digest_matches() -> None:
    secret = credentials.mint("jpk", ids.new_ulid())
    stored = credentials.digest(secret)
    assert secret not in stored
    assert credentials.matches(secret, stored)
    assert not credentials.matches(secret[:-1] + ("a" if secret[-1] != "a" else "b"), stored)


def test_ulids_sort_by_time_and_match_the_seed_pattern() -> None:
    first, second = ids.new_id("jreq"), ids.new_id("jreq")
    assert re.fullmatch(r"^jreq_[0-9a-hjkmnp-tv-z]{26,52}$", first)
    assert first[:15] <= second[:15]


@pytest.mark.parametrize(
    ("header", "credential"),
    [
        ("Bearer jpk_x", "jpk_x"),
        ("bearer  jpk_x ", "jpk_x"),
        ("BEARER jpk_x", "jpk_x"),
        ("Basic jpk_x", ""),
        ("jpk_x", ""),
        ("Bearer", ""),
        ("", ""),
    ],
)
def test_a_bearer_header_gives_its_credential_and_any_other_scheme_none(header: str, credential: str) -> None:
    assert credentials.bearer(header) == credential
