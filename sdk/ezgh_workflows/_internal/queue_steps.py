"""`send_to_queue`: sending messages to an EZGH queue as a step, exactly once (seed 004).

The step is a ``run`` step whose function calls ``queues.send(...)`` with the Idempotency-Key
``wfq_<hex SHA-256 of "<runId>:<stepId>">`` (the same on every attempt, so a resend after a crash
gets the first answer instead of storing a second copy). A FIFO message (one with a
``groupId``) without its own ``dedupId`` gets ``<hex>:<index>``. A 4xx answer from Queues (bad
message, missing queue, refused permission) fails the step at once, without retries, except
``409 idempotency_conflict`` "still in progress" (an earlier attempt's send has not answered
yet), which the step's retry policy retries; the client itself resends 429 (not
``quota_exceeded``), 5xx and network errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .api import ApiError
from .errors import NonRetryableError
from .step_context import step_context

MAX_MESSAGES = 10


class QueueSendError(NonRetryableError):
    """Queues refused the messages (a 4xx): the step fails without retries."""


class QueueSendInProgress(Exception):
    """An earlier send with the step's key is still in progress: the step is retried."""


def _in_progress(err: ApiError) -> bool:
    return (
        err.status == 409
        and err.code == "idempotency_conflict"
        and "in progress" in (err.message or "")
    )


def check_messages(messages: Any) -> list[dict[str, Any]]:
    """A copy of 1 to 10 message objects; ValueError otherwise (at the call, not in the step)."""
    if isinstance(messages, dict | str) or not hasattr(messages, "__iter__"):
        raise ValueError(
            "messages must be a list of 1 to 10 {body, attributes?, groupId?, dedupId?}"
        )
    copied = [dict(m) if isinstance(m, dict) else m for m in messages]
    if not 1 <= len(copied) <= MAX_MESSAGES:
        raise ValueError(f"send_to_queue sends 1 to {MAX_MESSAGES} messages, got {len(copied)}")
    if any(not isinstance(m, dict) for m in copied):
        raise ValueError("each message must be a dict {body, attributes?, groupId?, dedupId?}")
    return copied


def send_fn(queues: Any, queue_id: str, messages: list[dict[str, Any]]) -> Callable[[], Any]:
    """The step's function: send with the step's `wfq_` key; the answer's messages."""

    def send() -> Any:
        digest = step_context().idempotency_key  # hex SHA-256 of "<runId>:<stepId>"
        outgoing = []
        for index, message in enumerate(messages):
            message = dict(message)
            if message.get("groupId") is not None and message.get("dedupId") is None:
                message["dedupId"] = f"{digest}:{index}"
            outgoing.append(message)
        try:
            answer = queues.send(queue_id, outgoing, idempotency_key=f"wfq_{digest}")
        except ApiError as err:
            resent = err.status == 429 and err.code != "quota_exceeded"  # the client's job
            if _in_progress(err):
                # An earlier attempt's send with this key has not answered yet: transient.
                # The step's retries resend the same key and get that send's answer.
                raise QueueSendInProgress(f"{err.status} {err.code}: {err.message}") from None
            if 400 <= err.status < 500 and not resent:
                raise QueueSendError(f"{err.status} {err.code}: {err.message}") from None
            raise
        return answer.get("messages", answer) if isinstance(answer, dict) else answer

    return send
