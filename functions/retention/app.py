"""Scheduled: mark join requests past their expiry `expired` (their reads already say so)."""

from typing import Any

from joinplane import expiry


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"expired": expiry.expire_due()}
