"""Scheduled: mark join requests past their expiry `expired` (their reads already say so), and let
retired pool CAs whose certificates have all expired leave the bundle; schedule the deletion of the
CA keys the other functions abandoned (they may not delete keys themselves)."""

from typing import Any

from joinplane import expiry


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    # The CAs' expiries are logged one by one; the answer keeps its one count (the requests').
    expiry.expire_retired_authorities()
    expiry.delete_abandoned_keys()
    return {"expired": expiry.expire_due()}
