"""Input rules of the seed docs, as pure functions that raise `ValidationError`."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ezgh_engine.errors import PayloadTooLarge, ValidationError

MAX_VALUE_BYTES = 1024 * 1024  # inputs, outputs, step results and callback bodies

RUN_KEY_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
WORKFLOW_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
APP_NAME_RE = re.compile(r"^[a-z0-9-]{1,64}$")
EXPLICIT_STEP_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
AUTO_STEP_ID_RE = re.compile(r"^(?P<name>.+)#(?P<n>[1-9][0-9]*)$", re.DOTALL)
UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)


def is_uuid(text: str) -> bool:
    """Whether `text` has a UUID's form (IDs in paths; anything else is a slug or name)."""
    return bool(UUID_RE.fullmatch(text))


def check_pattern(field: str, value: object, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValidationError(f"{field} must match {rule}")
    return value


def check_run_key(value: object) -> str:
    return check_pattern("runKey", value, RUN_KEY_RE, "^[A-Za-z0-9._:-]{1,128}$")


def check_workflow_name(value: object) -> str:
    return check_pattern("workflow", value, WORKFLOW_NAME_RE, "^[A-Za-z0-9_-]{1,64}$")


def check_step_name(value: object) -> str:
    """Step names are 1 to 256 bytes of UTF-8 without NUL (seed 001)."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ValidationError("step name must be 1 to 256 bytes of UTF-8 without NUL")
    if len(value.encode("utf-8", "surrogatepass")) > 256:
        raise ValidationError("step name must be 1 to 256 bytes of UTF-8 without NUL")
    return value


def check_step_id(value: object) -> str:
    """A step ID is an explicit ID or `<name>#<n>` (docs/protocol.md section 3)."""
    if isinstance(value, str):
        if EXPLICIT_STEP_ID_RE.fullmatch(value):
            return value
        auto = AUTO_STEP_ID_RE.fullmatch(value)
        if auto:
            check_step_name(auto.group("name"))
            return value
    raise ValidationError("stepId must be an explicit step ID or <name>#<n>")


def _finite(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("non-finite number")


def encode_value(value: Any, field: str = "value") -> str:
    """Encode a JSON value, refusing NaN/Infinity and anything over 1 MiB."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{field} is not a JSON value: {exc}") from None
    if len(text.encode()) > MAX_VALUE_BYTES:
        raise PayloadTooLarge(f"{field} is larger than 1 MiB")
    return text
