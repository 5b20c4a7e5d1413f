"""Scheduled: mark join requests past their expiry `expired` (their reads already say so)."""

from typing import Any

from joinplane import join_requests


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"expired": join_requests.expire_due()}
