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


_APP_REF = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_app_ref(app: object) -> str:
    """An app's ID, `wfa_` slug or name (the engine resolves it in the run's project)."""
    if not isinstance(app, str) or not _APP_REF.fullmatch(app):
        raise ValueError(f"invalid app {app!r}: an app ID, slug or name")
    return app


def check_json(value: Any, what: str) -> Any:
    try:
        return values.roundtrip(value)
    except ValueRuleError as exc:
        raise ValueError(f"{what}: {exc}") from None
