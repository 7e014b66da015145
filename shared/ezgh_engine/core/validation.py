"""Input rules of the seed docs, as pure functions that raise `ValidationError`."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ezgh_engine import clock
from ezgh_engine.errors import PayloadTooLarge, ValidationError

MAX_VALUE_BYTES = 1024 * 1024  # inputs, outputs, step results and callback bodies
# How deeply arrays and objects may nest in a JSON value (`{"a": [1]}` is 2 levels). Far
# above what real inputs use and far below where encoding, validation and Python's recursion
# give out (the SDK checks the same limit before it sends a value).
MAX_DEPTH = 64
DEPTH_RULE = f"nested at most {MAX_DEPTH} levels deep"

RUN_KEY_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
WORKFLOW_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# The workflows one app hosts at most (a push app's sync, a pull app's workers together):
# the app's item holds their names (1,000 of 64 characters: 66 KB of DynamoDB's 400 KB).
MAX_APP_WORKFLOWS = 1000
# A value kept whole in a DynamoDB item of the registry (a schedule's input): DynamoDB's
# 400 KB per item, less room for the item's other fields. A larger one
# is refused before anything is written (413), never a 500 from the write.
MAX_ITEM_VALUE_BYTES = 384 * 1024
APP_NAME_RE = re.compile(r"^[a-z0-9-]{1,64}$")
EXPLICIT_STEP_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
AUTO_STEP_ID_RE = re.compile(r"^(?P<name>.+)#(?P<n>[1-9][0-9]*)$", re.DOTALL)
UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)


def iso_time(value: str | None, field: str) -> str | None:
    """Normalise a filter's ISO 8601 time to the API's format (`...T...000Z`, sortable as
    text); `ValidationError` naming `field` otherwise."""
    if value is None:
        return None
    try:
        return clock.iso(clock.parse_iso(value))
    except ValueError:
        raise ValidationError(f"{field}: must be an ISO 8601 time") from None


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


def _has_lone_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_json_value(value: Any, field: str = "value", *, extra_levels: int = 0) -> None:
    """Refuse a decoded JSON value that nests deeper than `MAX_DEPTH` (plus `extra_levels` for
    an envelope, e.g. a request body around a run's input) or holds a lone UTF-16 surrogate
    (`"\\ud800"`: valid JSON escape, but no Unicode text). Iterative: it never recurses."""
    limit = MAX_DEPTH + extra_levels
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _has_lone_surrogate(item):
                raise ValidationError(f"{field} holds a lone UTF-16 surrogate (not Unicode text)")
        elif isinstance(item, dict | list):
            if depth >= limit:
                raise ValidationError(f"{field} must be {DEPTH_RULE}")
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)


def parse_json(raw: str, field: str = "body", *, extra_levels: int = 0) -> Any:
    """Decode JSON text and apply `check_json_value`; `ValidationError` for anything that is
    not JSON, including nesting too deep for the decoder itself (`RecursionError`)."""
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValidationError(f"{field} is not valid JSON") from None
    except RecursionError:  # far deeper than the limit: the decoder itself gave out
        raise ValidationError(f"{field} must be {DEPTH_RULE}") from None
    check_json_value(value, field, extra_levels=extra_levels)
    return value


def _finite(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("non-finite number")


def encode_value(value: Any, field: str = "value") -> str:
    """Encode a JSON value, refusing NaN/Infinity, lone surrogates, nesting deeper than
    `MAX_DEPTH` and anything over 1 MiB."""
    check_json_value(value, field)
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{field} is not a JSON value: {exc}") from None
    if len(text.encode()) > MAX_VALUE_BYTES:
        raise PayloadTooLarge(f"{field} is larger than 1 MiB")
    return text


def encode_item_value(value: Any, field: str, limit: int = MAX_ITEM_VALUE_BYTES) -> str:
    """`encode_value`, held to what one DynamoDB item keeps (`MAX_ITEM_VALUE_BYTES`):
    `PayloadTooLarge` (413) naming `field` past it."""
    text = encode_value(value, field)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise PayloadTooLarge(
            f"{field} is {size} bytes as JSON; at most {limit} bytes ({limit // 1024} KiB) are "
            "kept here (DynamoDB keeps 400 KB per item)"
        )
    return text


def check_app_workflows(names: list[str], field: str = "workflows") -> None:
    """`ValidationError` naming `field` unless `names` are workflow names (as a pull app's
    workers announce them), at most `MAX_APP_WORKFLOWS`."""
    if len(names) > MAX_APP_WORKFLOWS:
        raise ValidationError(
            f"{field}: {len(names)} workflows; an app hosts at most {MAX_APP_WORKFLOWS}"
        )
    bad = [name for name in names if not isinstance(name, str) or not WORKFLOW_NAME_RE.match(name)]
    if bad:
        shown = [str(name)[:80] for name in bad[:5]]
        raise ValidationError(f"{field}: invalid names {shown} (^[A-Za-z0-9_-]{{1,64}}$)")
