"""Fixtures for the attestation tests; the helpers are tests/support/attestation.py's."""

from __future__ import annotations

import pytest

from tests.support.attestation import make_site


@pytest.fixture
def site_a(admin_key: str) -> str:
    """A platform admin's key, with site-a made (a site exists once a pool names it)."""
    make_site(admin_key, "site-a")
    return admin_key
