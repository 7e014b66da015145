"""Checks of step call arguments: timeouts, workflow names, JSON inputs, over-long sleeps."""

from __future__ import annotations

import re
from typing import Any

from . import values
from .errors import ErrorBody, ValueRuleError, error_body

_WORKFLOW_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MESSAGE_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,256}")
MAX_MESSAGE_WAIT_SECONDS = 30 * 86_400


def too_long(what: str) -> ErrorBody:
    # A step error, not a ValueError at the call: the run goes on and may catch it.
    return error_body(
        "workflows.sleep_too_long", "SleepTooLongError", f"{what} is longer than a year (365 days)"
    )


def check_timeout(value: object, low: float, high: float, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{what} must be a number of seconds from {low:g} to {high:g}")
    return int(value) if float(value).is_integer() else int(value) + 1


def check_workflow(workflow: object) -> str:
    if not isinstance(workflow, str) or not _WORKFLOW_NAME.fullmatch(workflow):
        raise ValueError(f"invalid workflow name {workflow!r}: must match ^[A-Za-z0-9_-]{{1,64}}$")
    return workflow


def check_json(value: Any, what: str) -> Any:
    try:
        return values.roundtrip(value)
    except ValueRuleError as exc:
        raise ValueError(f"{what}: {exc}") from None
