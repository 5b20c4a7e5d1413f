"""What every input model shares: identifier patterns (from the product's id rules and the
joinRequests API) and the strict model configuration.

STRICT: unknown fields are errors, JSON types are not coerced ("600" is not an integer), and each
model's validator is built on first use rather than at import: a function imports every model of
its family but one request validates only one of them, and the import is the cold start.
"""

from pydantic import ConfigDict

from joinplane import ids

STRICT = ConfigDict(extra="forbid", strict=True, defer_build=True)

TENANT_ID = r"^[A-Za-z0-9._:-]{1,128}$"
POOL_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
SITE_ID = POOL_ID
WORKSPACE_ID = r"^[A-Za-z0-9._:-]{1,128}$"
# Free text a person typed: no control characters (the joinRequests API's `reason` rule).
TEXT = r"^[^\u0000-\u001f\u007f]*$"
# An instant as every answer gives it: RFC 3339, UTC, with `Z`.
TIMESTAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"
# An audit event's EventBridge detail type (`security.machine.joined`).
DETAIL_TYPE = r"^security\.[a-z-]+\.[a-z-]+$"
ULID = ids.ULID_PATTERN
