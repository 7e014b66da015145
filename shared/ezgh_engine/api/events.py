"""Normalizing API Gateway events before routing."""

from __future__ import annotations

import base64
import binascii
from typing import Any

_JSON = "application/json"

# Stands in for a body that is not UTF-8 text: the resolver's JSON deserializer
# (`api.errors.parse_json_body`) answers it 400 instead of Powertools failing to decode it.
UNDECODABLE_BODY = "\x00ezgh:undecodable-body\x00"


def _as_text(event: dict[str, Any]) -> dict[str, Any]:
    """Decode a base64 body (API Gateway's encoding for non-text bodies) to text here, once.

    JSON is UTF-8 text; a body that does not decode is replaced by `UNDECODABLE_BODY`, so the
    request is refused as a validation error rather than raising inside the resolver.
    """
    if not event.get("isBase64Encoded") or not isinstance(event.get("body"), str):
        return event
    try:
        text = base64.b64decode(event["body"], validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        text = UNDECODABLE_BODY
    return {**event, "body": text, "isBase64Encoded": False}


def as_json_request(event: dict[str, Any]) -> dict[str, Any]:
    """Treat every request body as JSON, whatever Content-Type the client sent.

    The API is JSON in and out; without this, a body sent as `curl -d` (form-encoded by
    default) would be ignored by validation and answered "field is required" instead of being
    read (or refused as malformed JSON).
    """
    event = _as_text(event)
    headers = event.get("headers") or {}
    if event.get("body") is None:
        return event
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    if content_type.split(";")[0].strip().lower() == _JSON:
        return event
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    headers["content-type"] = _JSON
    return {**event, "headers": headers}
