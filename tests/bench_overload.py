"""`make bench`: 200 machines joining at once against a `maxUses: 50` token of the local runtime.

Two rounds, each against a fresh token: one raw request per machine (what each first hears: an
admission, the token used up, or a throttle; never a reset or a 500), then the CLI's HTTP client
with its retries (exactly 50 admitted, every other machine told the token is used up). Prints the
answers and the wall time of each round. The overload tests run a smaller crowd of the same kind.
"""

from __future__ import annotations

import io
import json
import sys
import time

from joinplane_cli import api
from tests.support.overload import csrs, join_together, new_token
from tests.support.runtime import local_runtime

MACHINES = 200
MAX_USES = 50


def main() -> int:
    with local_runtime(log=io.StringIO()) as runtime:
        assert runtime.admin_key and runtime.dev and runtime.dev.pool
        failures, lines = [], []
        for label, retry in (("raw", None), ("with the CLI's retries", api.Retry())):
            token = new_token(runtime.url, runtime.admin_key, runtime.dev.pool, MAX_USES)
            requests = csrs(MACHINES)
            started = time.monotonic()
            burst = join_together(runtime.url, token, requests, retry=retry)
            elapsed = time.monotonic() - started
            summary = json.dumps(burst.summary())
            lines.append(f"{MACHINES} joins, maxUses {MAX_USES}, {label}: {elapsed:.1f} s {summary}")
            if burst.dropped or burst.count(500):
                failures.append(f"{label}: a reset or a 500")
            if retry is not None and burst.count(200) != MAX_USES:
                failures.append(f"{label}: {burst.count(200)} admitted, not {MAX_USES}")
        # After the functions' own log lines, which go to stdout as on Lambda.
        print("\n".join(["", *lines, *(f"FAILED {failure}" for failure in failures)]), flush=True)
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
