"""Normalizing API Gateway events before routing."""

from __future__ import annotations

from typing import Any

_JSON = "application/json"


def as_json_request(event: dict[str, Any]) -> dict[str, Any]:
    """Treat every request body as JSON, whatever Content-Type the client sent.

    The API is JSON in and out; without this, a body sent as `curl -d` (form-encoded by
    default) would be ignored by validation and answered "field is required" instead of being
    read (or refused as malformed JSON).
    """
    headers = event.get("headers") or {}
    if event.get("body") is None:
        return event
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    if content_type.split(";")[0].strip().lower() == _JSON:
        return event
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    headers["content-type"] = _JSON
    return {**event, "headers": headers}
