"""Identifier patterns shared by every model (from the brief and seed 001)."""

TENANT_ID = r"^[A-Za-z0-9._:-]{1,128}$"
POOL_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
SITE_ID = POOL_ID
WORKSPACE_ID = r"^[A-Za-z0-9._:-]{1,128}$"
# Free text a person typed: no control characters (seed 001's `reason` rule).
TEXT = r"^[^\u0000-\u001f\u007f]*$"
ULID = "[0-9a-hjkmnp-tv-z]{26}"
