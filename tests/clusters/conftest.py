"""Fixtures for the cluster tests; the helpers (post, make_cluster, join_body...) are
tests/support/clusters.py's."""

from __future__ import annotations

import pytest

from tests.support.clusters import make_cluster


@pytest.fixture
def key(admin_key: str) -> str:
    """The cluster key of pool acme/sylve, made a cluster."""
    return make_cluster(admin_key)
