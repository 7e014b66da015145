"""One error tree for the engine.

Each error carries its HTTP status and contract code, so errors map to answers in exactly one
place (`ezgh_engine.api.errors`). Retryability is a property of the error, not a guess at the
catch site.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    status: int = 500
    code: str = "internal_error"
    retryable: bool = False

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_body(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class ValidationError(EngineError):
    status, code = 400, "validation_error"


class Unauthorized(EngineError):
    status, code = 401, "unauthorized"


class Forbidden(EngineError):
    status, code = 403, "forbidden"


class NotFound(EngineError):
    status, code = 404, "not_found"


class Conflict(EngineError):
    """409; `code` is one of run_key_conflict, idempotency_conflict, app_not_synced, invalid_state."""

    status, code = 409, "invalid_state"


class PayloadTooLarge(EngineError):
    status, code = 413, "payload_too_large"


class RateLimited(EngineError):
    """429: the caller sends faster than its limit; `retry_after_seconds` goes out as the
    answer's `Retry-After`."""

    status, code = 429, "rate_limited"
    retryable = True

    def __init__(self, message: str, *, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class StaleInvocation(Conflict):
    """A step call or outcome from an invocation whose lease was taken over: refused, no effect."""

    code = "invalid_state"


class TransientError(EngineError):
    """A dependency failed in a way worth retrying (throttling, a timeout)."""

    status, code = 503, "unavailable"
    retryable = True
