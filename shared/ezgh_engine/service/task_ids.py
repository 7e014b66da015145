"""A pull task's ID: an HMAC-signed token naming the invocation the task is, so a worker's
heartbeat and outcome can be applied without any lookup beyond the run (or its step).

A main task names the run, its lease epoch, the reason (`seq`) the invocation answers, its
ID and start time. A branch task (one parallel step in an invocation of its own,
`service.pull_branch`) also names its step, and its epoch is the step's branch epoch; its
`attempt` is the step's attempt when the task went out (how its answer tells a step it ran
from one it never reached)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from typing import Any

from ezgh_engine.config import settings
from ezgh_engine.errors import Unauthorized, ValidationError

ENV_PULL_LEASE = "EZGH_PULL_LEASE_SECONDS"
DEFAULT_PULL_LEASE_SECONDS = 60
# Step calls are guarded by a read of the run's epoch and lease end (or the branch step's)
# and the steps' own conditions: the token works only while the lease lasts (heartbeats
# extend it, an answer ends it). The token itself may live long, so a worker that keeps
# heartbeating can run a step for hours.
TOKEN_LIFETIME_MS = 24 * 3600 * 1000


def pull_lease_seconds() -> int:
    """How long a pull task's lease lasts from its receipt or its last heartbeat."""
    return max(1, int(os.environ.get(ENV_PULL_LEASE, str(DEFAULT_PULL_LEASE_SECONDS))))


@dataclass(frozen=True)
class TaskClaims:
    """What a task ID names (see the module's doc); `step_id` only on a branch task."""

    run_id: str
    epoch: int
    seq: int
    invocation_id: str
    started_at: str
    step_id: str | None = None
    attempt: int = 0


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _sign(payload: str) -> str:
    key = hmac.new(settings().token_secret.encode(), b"ezgh-task", hashlib.sha256).digest()
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def mint_task_id(c: TaskClaims) -> str:
    """The signed task ID of `c`."""
    body: dict[str, Any] = {
        "r": c.run_id,
        "e": c.epoch,
        "s": c.seq,
        "i": c.invocation_id,
        "t": c.started_at,
    }
    if c.step_id is not None:
        body.update(b=c.step_id, a=c.attempt)
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{payload}.{_sign(payload)}"


def verify_task_id(task_id: Any) -> TaskClaims:
    """The claims of a task ID the engine signed; `Unauthorized` for any other."""
    if not isinstance(task_id, str):
        raise ValidationError("taskId: required")
    payload, _, signature = task_id.partition(".")
    # A real task ID is ASCII; `compare_digest` raises TypeError on non-ASCII text.
    if not payload or not task_id.isascii() or not hmac.compare_digest(signature, _sign(payload)):
        raise Unauthorized("invalid taskId")
    try:
        body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        step = body.get("b")
        return TaskClaims(
            str(body["r"]),
            int(body["e"]),
            int(body["s"]),
            str(body["i"]),
            str(body["t"]),
            str(step) if step is not None else None,
            int(body.get("a", 0)),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        raise Unauthorized("invalid taskId") from None
