"""The API's success answers: JSON bodies (any JSON value) and 204s."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from ezgh_engine.core.sizes import LAMBDA_PAYLOAD_BYTES, carried_size
from ezgh_engine.errors import PayloadTooLarge

# What an answer's body may be, as Lambda carries it, with room for the envelope.
MAX_CARRIED_BODY = LAMBDA_PAYLOAD_BYTES - 64 * 1024


def json_response(status: int, body: Any) -> Response[Any]:
    """Always encode: Powertools would pass a `str` body through unencoded, and a payload
    (GetPayload) may be any JSON value, a string included."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    if carried_size(text) > MAX_CARRIED_BODY:
        # Every answer is built to fit (`core.answers`); should one not, a clear error in the
        # contract's shape rather than Lambda's own 5xx for an answer over 6 MB.
        raise PayloadTooLarge(
            f"the answer would be {carried_size(text)} bytes, more than a Lambda function "
            "answers (6 MB); ask for fewer items, or read large values with GetPayload"
        )
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=text)


def no_content() -> Response[Any]:
    return Response(status_code=204, body="")
