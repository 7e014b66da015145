"""Cron timetables of schedules: validation, occurrences, and EventBridge Scheduler's form.

Users write standard 5-field cron (`minute hour day-of-month month day-of-week`, day-of-week
0-6 with 0 or 7 for Sunday) and an IANA time zone. EventBridge Scheduler wants
`cron(minutes hours day-of-month month day-of-week year)` with exactly one of day-of-month
and day-of-week set to `?`, and day-of-week numbered 1-7 from Sunday. `to_aws` converts;
`from_aws` converts back (the local Scheduler emulator reads what was stored).

Pure: no I/O, no clock (callers pass `now`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from ezgh_engine.errors import ValidationError

_AWS = re.compile(r"^cron\((.*)\)$")
_DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def check_timezone(name: str | None) -> str:
    """The IANA zone name (default UTC); 400 `timezone: ...` when unknown."""
    if name is None:
        return "UTC"
    if not isinstance(name, str) or not name.strip() or len(name) > 64:
        raise ValidationError("timezone: must be an IANA time zone name such as Europe/Paris")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationError(
            f"timezone: {name!r} is not an IANA time zone name (e.g. UTC, Europe/Paris)"
        ) from None
    return name


def check_cron(expression: str) -> str:
    """A valid 5-field cron expression, normalised to single spaces; 400 `cron: ...` else."""
    if not isinstance(expression, str):
        raise ValidationError("cron: must be a string of 5 fields")
    fields = expression.split()
    if len(fields) != 5:
        raise ValidationError(
            "cron: must have 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)}"
        )
    normal = " ".join(fields)
    try:
        valid = croniter.is_valid(normal)
    except Exception:
        valid = False
    if not valid:
        raise ValidationError(f"cron: {normal!r} is not a valid cron expression")
    dom, dow = fields[2], fields[4]
    if dom not in ("*", "?") and dow not in ("*", "?"):
        # Standard cron ORs the two; EventBridge Scheduler cannot express that.
        raise ValidationError(
            "cron: set day-of-month or day-of-week, not both (the other must be *)"
        )
    _aws_dow(fields[4])  # refuses what EventBridge cannot express
    return normal


def _aws_dow(field: str) -> str:
    if field in ("*", "?"):
        return field
    try:
        expanded = croniter(f"* * * * {field}").expanded[4]
    except Exception:
        raise ValidationError(f"cron: day-of-week {field!r} is invalid") from None
    days: set[int] = set()
    for value in expanded:
        if not isinstance(value, int):
            raise ValidationError(f"cron: day-of-week {field!r} is not supported")
        days.add(value % 7)
    return ",".join(str(d + 1) for d in sorted(days))


def to_aws(expression: str) -> str:
    """`cron(...)` for EventBridge Scheduler from a valid 5-field expression."""
    minute, hour, dom, month, dow = check_cron(expression).split()
    if dow in ("*", "?"):
        dom, dow = ("*" if dom == "?" else dom), "?"
    else:
        dom, dow = "?", _aws_dow(dow)
    return f"cron({minute} {hour} {dom} {month} {dow} *)"


def from_aws(aws_expression: str) -> str | None:
    """The 5-field expression of a `cron(...)` made by `to_aws`, or None when it is not one."""
    match = _AWS.match(aws_expression.strip())
    if not match:
        return None
    fields = match.group(1).split()
    if len(fields) != 6:
        return None
    minute, hour, dom, month, dow, _year = fields
    dom = "*" if dom == "?" else dom
    if dow == "?":
        dow = "*"
    else:
        parts = []
        for part in dow.split(","):
            if part.isdigit():
                parts.append(str((int(part) - 1) % 7))
            elif part.upper()[:3] in _DOW_NAMES:
                parts.append(part)
            else:
                return None
        dow = ",".join(parts)
    return f"{minute} {hour} {dom} {month} {dow}"


def latest(expression: str, timezone: str, at_or_before: datetime) -> datetime:
    """The latest planned time at or before `at_or_before` (UTC, whole minute)."""
    zone = ZoneInfo(timezone)
    # croniter's get_prev is strictly before its start: start just after the moment.
    start = at_or_before.astimezone(zone).replace(second=0, microsecond=0) + timedelta(minutes=1)
    value = croniter(expression, start - timedelta(seconds=1)).get_prev(datetime)
    return value.astimezone(UTC)


def next_after(expression: str, timezone: str, after: datetime) -> datetime:
    """The first planned time strictly after `after` (UTC)."""
    zone = ZoneInfo(timezone)
    value = croniter(expression, after.astimezone(zone)).get_next(datetime)
    return value.astimezone(UTC)
