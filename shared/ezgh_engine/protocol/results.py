"""What a step op answers (docs/protocol.md section 2), typed. Pure.

`started` (a run step runs now, with its attempt; `inline` when its start rode the previous
step's end), `ok` (written as asked; a callback's URL), `retry` (a failed attempt runs again
at `retryAt`), `recorded` (the step holds something already: the recorded step is answered
instead of a second effect; `service.step_ops` fills in its body).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ezgh_engine.protocol.ops import InlineStart


@dataclass(frozen=True)
class Started:
    step_id: str
    attempt: int
    inline: InlineStart | None = None

    def to_wire(self) -> dict[str, Any]:
        body = {"stepId": self.step_id, "result": "started", "attempt": self.attempt}
        return {**body, "inline": self.inline.to_wire()} if self.inline else body


@dataclass(frozen=True)
class Ok:
    step_id: str
    url: str | None = None

    def to_wire(self) -> dict[str, Any]:
        body = {"stepId": self.step_id, "result": "ok"}
        return {**body, "url": self.url} if self.url else body


@dataclass(frozen=True)
class RetryAt:
    step_id: str
    retry_at: str

    def to_wire(self) -> dict[str, Any]:
        return {"stepId": self.step_id, "result": "retry", "retryAt": self.retry_at}


@dataclass(frozen=True)
class Recorded:
    """The step holds an outcome (or another attempt) already: answer what is recorded."""

    step_id: str

    def to_wire_with(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"stepId": self.step_id, "result": "recorded", "step": step}


Result = Started | Ok | RetryAt | Recorded
