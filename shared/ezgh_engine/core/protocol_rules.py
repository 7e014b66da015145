"""The decisions both sides of the protocol make, written once (docs/architecture.md, "Who
owns which decision").

This module is shipped twice, byte for byte: as ``ezgh_engine.core.protocol_rules`` (the
owner: the engine enforces these decisions) and as ``ezgh_workflows._internal.protocol_rules``
(the SDK's copy: the SDK is distributed without the engine and must not import it, and the
engine must not import the SDK's HTTP stack at every cold start to read a constant).
tests/unit/test_protocol_rules.py fails when the two files differ. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A run's statuses once it ended, and the statuses of a live one (a run is one or the other).
RUN_ENDED_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timedOut"})
RUN_LIVE_STATUSES: frozenset[str] = frozenset({"running", "cancelling"})
# A step's statuses once it ended: its outcome is recorded and replays as is.
STEP_ENDED_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

# `retries=None` on a `run` step means this many retries (4 attempts), as Inngest and Temporal
# retry by default; a step asks for at most MAX_RETRIES, whatever it says (docs/protocol.md).
DEFAULT_RETRIES = 3
MAX_RETRIES = 100


# A failed attempt's retry waits exponentially from 1 s, doubling, capped at 10 minutes,
# scaled by a random factor in [0.5, 1) ("equal jitter"): the engine schedules it, the
# SDK's test kit (`ezgh_workflows.testing`) skips its clock over the same wait.
RETRY_BASE_SECONDS = 1.0
RETRY_FACTOR = 2.0
RETRY_MAX_DELAY_SECONDS = 600.0


def retry_delay_seconds(attempt: int, jitter: float) -> float:
    """Seconds before the attempt after failed ``attempt`` (from 1), for ``jitter`` in
    [0, 1): steps that failed together don't all come back at the same moment."""
    ceiling = min(RETRY_MAX_DELAY_SECONDS, RETRY_BASE_SECONDS * RETRY_FACTOR ** max(0, attempt - 1))
    return ceiling * (0.5 + 0.5 * jitter)


def may_retry(attempt: int, retries: int) -> bool:
    """Whether a retryable failure of ``attempt`` (from 1) of a step allowed ``retries``
    retries runs again: the SDK sends such a fail at once (not held), the engine schedules
    the retry."""
    return attempt <= min(retries, MAX_RETRIES)


# An invocation whose step calls stayed throttled (the engine answered 429 or 503 for longer
# than the SDK resends one call) answers the outcome `throttled`, with `retryAfter` (seconds,
# or null): the engine was busy, not the app. The engine delivers it again, not before
# `retryAfter` (at most THROTTLED_MAX_RETRY_AFTER_SECONDS) and after a wait from 2 s doubling
# to 60 s, with equal jitter, and counts no failed delivery: a throttle never ends a run
# `workflows.app_unreachable`. The bound: past MAX_THROTTLED_DELIVERIES in a row with no
# outcome between them (at least an hour of throttling), each further one counts as a failed
# delivery, so a run cannot be delivered forever.
THROTTLED_OUTCOME = "throttled"
THROTTLED_BASE_SECONDS = 2.0
THROTTLED_MAX_DELAY_SECONDS = 60.0
THROTTLED_MAX_RETRY_AFTER_SECONDS = 900.0
MAX_THROTTLED_DELIVERIES = 100


def throttled_delay_seconds(throttles: int, retry_after: float | None, jitter: float) -> float:
    """Seconds before the delivery after ``throttles`` throttled ones in a row (from 1), for
    ``jitter`` in [0, 1): never less than the answer's ``retry_after`` (capped)."""
    ceiling = min(
        THROTTLED_MAX_DELAY_SECONDS, THROTTLED_BASE_SECONDS * 2 ** max(0, min(throttles, 32) - 1)
    )
    asked = min(max(retry_after or 0.0, 0.0), THROTTLED_MAX_RETRY_AFTER_SECONDS)
    return max(ceiling * (0.5 + 0.5 * jitter), asked)


# A recorded error's `code` and `name`, and its `message`, at most (UTF-8 bytes): an error is
# kept in its step's or its run's item (DynamoDB keeps 400 KB per item). Longer ones are cut
# where they are made, the SDK before it sends them and the engine when it receives them.
MAX_ERROR_FIELD_BYTES = 256
MAX_ERROR_MESSAGE_BYTES = 8192
CUT_MARK = " [cut]"


def clip(text: str, limit: int) -> str:
    """`text`, cut to at most `limit` UTF-8 bytes (ending with `CUT_MARK` when cut)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    room = limit - len(CUT_MARK.encode())
    return data[:room].decode("utf-8", "ignore") + CUT_MARK


def end_differs(op: Mapping[str, Any], result: Mapping[str, Any]) -> bool:
    """Whether a step end (``complete`` or ``fail``) was answered ``recorded`` with another
    outcome than it carried: another invocation recorded the step first, so this one went on
    with a value the run does not hold."""
    if result.get("result") != "recorded":
        return False
    step = result.get("step")
    step = step if isinstance(step, Mapping) else {}
    if op.get("op") == "fail":
        return bool(step.get("status") != "failed" or step.get("error") != op.get("error"))
    return bool(step.get("status") != "completed" or step.get("output") != op.get("output"))
