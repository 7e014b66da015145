"""The one place errors become HTTP answers: `{"error": {"code", "message"}}`.

- `EngineError` and subclasses: their own status and code.
- Request validation (pydantic, Powertools): 400 `validation_error`, naming the field.
- An unknown path: 404 `not_found`; a path served, with a method it does not serve (TRACE,
  PROPFIND, PUT on a read-only path, ...): 405 `method_not_allowed` with `Allow`.
- A key over its rate (`RateLimited`): 429 `rate_limited` with `Retry-After`.
- A dependency that throttles (a DynamoDB, SQS or S3 throttle after botocore's retries, a
  transaction conflict: `TransientError`): 429 `rate_limited` with `Retry-After`, the
  contract's answer to "try again later". Step calls (`/v1/invocations/...`, the engine's own
  protocol) answer 503 `unavailable` instead, which the SDK's step transport resends.
- Anything else: logged with its stack trace, answered 500 `internal_error` with a fixed
  message. A stack trace never reaches a body.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from botocore.exceptions import ClientError

from ezgh_engine.core import validation
from ezgh_engine.errors import (
    EngineError,
    PayloadTooLarge,
    RateLimited,
    TransientError,
    ValidationError,
)

logger = Logger(service="ezgh-api")

MAX_BODY_BYTES = 1024 * 1024  # 1 MiB, the contract's limit on bodies and JSON values
# A step call's ops carry values of up to 1 MiB each (held to it by `protocol.ops`), so its
# body is one such value and its envelope over the limit on bodies: a step's end of 1 MiB
# rides the call that starts the next step (refused 413 at the
# body limit, it would fail the invocation).
STEP_CALLS_PATH = "/v1/invocations/steps"
MAX_STEP_CALL_BYTES = 2 * MAX_BODY_BYTES
# The bodies that may carry a value of 1 MiB and more: step calls, and a pull worker's
# outcome (its output of up to 1 MiB, and the step ends it holds: the SDK keeps those under
# 256 KiB, sending more by a step call first).
LARGE_BODY_PATHS = frozenset({STEP_CALLS_PATH, "/v1/invocations/outcome"})

# A body may wrap its JSON values a few levels deep (an outcome's `ops[i].output`); each value
# is then held to `validation.MAX_DEPTH` itself.
ENVELOPE_LEVELS = 4

# Where a value came from, as Powertools names it in an error's `loc`.
_LOCATIONS = ("body", "query", "path", "header", "cookie")


# What a throttled caller waits before trying again (seconds): DynamoDB's adaptive
# capacity and SQS/S3 throttles clear within about a second.
RETRY_AFTER_SECONDS = 1

# Paths of the engine-to-SDK protocol: their clients resend a 5xx, not a 429.
PROTOCOL_PREFIX = "/v1/invocations/"


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response[Any]:
    """An error answer in the contract's shape."""
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body={"error": {"code": code, "message": message}},
        headers=headers,
    )


def busy_response(path: str, message: str) -> Response[Any]:
    """A dependency throttled: 429 `rate_limited` with Retry-After on the contract's paths;
    503 `unavailable` on the protocol's (its clients resend 5xx answers)."""
    retry_after = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if path.startswith(PROTOCOL_PREFIX):
        return error_response(503, TransientError.code, message, retry_after)
    return error_response(429, "rate_limited", message, retry_after)


def is_throttle(exc: ClientError) -> bool:
    """An AWS error that means the caller should slow down and try again (`aws.is_throttle`,
    the one list of throttle codes, or a transaction conflict)."""
    from ezgh_engine.adapters import aws, ddb

    return aws.is_throttle(exc) or (
        "TransactionConflict" in ddb.cancellation_codes(exc)
        or ddb.error_code(exc) == "TransactionConflictException"
    )


def parse_json_body(raw: str, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """Decode a request body: size first (413), then JSON (400), which must be an object.

    Installed as the resolver's JSON deserializer, so it runs before any validation and
    every route reads its body through it.
    """
    from ezgh_engine.api.events import UNDECODABLE_BODY

    if raw == UNDECODABLE_BODY:
        raise ValidationError("request body is not UTF-8 text")
    if len(raw.encode()) > max_bytes:
        raise PayloadTooLarge(
            f"request body is larger than {max_bytes} bytes ({max_bytes // MAX_BODY_BYTES} MiB)"
        )
    value = validation.parse_json(raw, "request body", extra_levels=ENVELOPE_LEVELS)
    if not isinstance(value, dict):
        raise ValidationError("request body must be a JSON object")
    return value


def check_value_size(value: Any, field: str) -> None:
    """413 when one JSON value (e.g. a run's input) is over 1 MiB encoded; 400 when it nests
    deeper than `validation.MAX_DEPTH` or holds a lone surrogate."""
    validation.check_json_value(value, field)
    encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    if len(encoded) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"{field} is larger than {MAX_BODY_BYTES} bytes (1 MiB) as JSON")


def _field_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in _LOCATIONS:
        where, parts = parts[0], parts[1:]
        return ".".join(parts) if parts else where
    return ".".join(parts) or "request"


def validation_message(errors: list[dict[str, Any]]) -> str:
    """`field: problem; ...` from pydantic-style errors, without echoing the input."""
    problems = []
    for err in errors[:5]:
        if err.get("type") == "json_invalid":
            problems.append("request body is not valid JSON")
            continue
        message = (
            "is required" if err.get("type") == "missing" else str(err.get("msg") or "is invalid")
        )
        problems.append(f"{_field_name(tuple(err.get('loc') or ()))}: {message}")
    return "; ".join(problems) or "the request is invalid"


def _on_engine_error(err: EngineError) -> Response[Any]:
    if err.status >= 500:
        logger.exception("engine error", extra={"code": err.code})
    headers = None
    if isinstance(err, RateLimited):
        headers = {"Retry-After": str(err.retry_after_seconds)}
    return error_response(err.status, err.code, err.message, headers)


def _on_validation(err: RequestValidationError) -> Response[Any]:
    return error_response(400, "validation_error", validation_message(list(err.errors())))


def _on_content_type(_: RequestUnsupportedContentType) -> Response[Any]:
    return error_response(400, "validation_error", "Content-Type must be application/json")


def served_methods(resolver: APIGatewayHttpResolver, path: str) -> list[str]:
    """The methods some route of the resolver serves at `path`, sorted."""
    routes = [*getattr(resolver, "_static_routes", ()), *getattr(resolver, "_dynamic_routes", ())]
    return sorted({r.method for r in routes if r.rule.match(path)})


def _on_unexpected(_: Exception) -> Response[Any]:
    # The stack trace goes to the log, never to the client.
    logger.exception("unhandled error")
    return error_response(500, "internal_error", "internal error")


def install(resolver: APIGatewayHttpResolver) -> None:
    """Register every error handler on the resolver (the most specific class wins)."""

    def path() -> str:
        try:
            return str(resolver.current_event.path or "")
        except Exception:  # no event bound: answer as the contract's paths do
            return ""

    def on_transient(err: TransientError) -> Response[Any]:
        logger.warning("dependency busy", extra={"error": err.message})
        return busy_response(path(), err.message)

    def on_not_found(_: NotFoundError) -> Response[Any]:
        allowed = served_methods(resolver, path())
        if not allowed:
            return error_response(404, "not_found", "no such path")
        return error_response(
            405,
            "method_not_allowed",
            f"this path serves {', '.join(allowed)}",
            {"Allow": ", ".join(allowed)},
        )

    def on_client_error(err: ClientError) -> Response[Any]:
        if is_throttle(err):
            from ezgh_engine.adapters import ddb

            logger.warning("dependency throttled", extra={"code": ddb.error_code(err)})
            return busy_response(path(), "the engine's storage is busy; try again shortly")
        return _on_unexpected(err)

    resolver.exception_handler(EngineError)(_on_engine_error)
    resolver.exception_handler(TransientError)(on_transient)
    resolver.exception_handler(ClientError)(on_client_error)
    resolver.exception_handler(RequestValidationError)(_on_validation)
    resolver.exception_handler(RequestUnsupportedContentType)(_on_content_type)
    resolver.not_found(on_not_found)
    resolver.exception_handler(Exception)(_on_unexpected)
