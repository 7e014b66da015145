"""The API's success answers: JSON bodies (any JSON value) and 204s."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types


def json_response(status: int, body: Any) -> Response[Any]:
    """Always encode: Powertools would pass a `str` body through unencoded, and a payload
    (GetPayload) may be any JSON value, a string included."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=text)


def no_content() -> Response[Any]:
    return Response(status_code=204, body="")
