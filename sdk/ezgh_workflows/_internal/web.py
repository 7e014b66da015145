"""HTTP plumbing for `PushApp`: ASGI 3 and AWS Lambda events in, JSON answers out."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_HEADERS = {"content-type": "application/json"}


@dataclass(frozen=True)
class HttpRequest:
    method: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    path: str = "/"  # as sent, without the query (the request signature covers it)


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: dict[str, Any]

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def error_response(status: int, code: str, message: str) -> HttpResponse:
    """The API's error shape: ``{"error": {"code", "message"}}`` (never a stack trace)."""
    return HttpResponse(status, {"error": {"code": code, "message": message}})


async def read_asgi_request(scope: Scope, receive: Receive) -> HttpRequest:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    headers = {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }
    raw_path = scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path else str(scope.get("path") or "/")
    method = str(scope.get("method", "GET")).upper()
    return HttpRequest(method, headers, b"".join(chunks), path.partition("?")[0] or "/")


async def send_asgi_response(send: Send, response: HttpResponse) -> None:
    body = response.encoded()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def run_lifespan(receive: Receive, send: Send) -> None:
    """Answer the ASGI lifespan protocol: nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def lambda_request(event: Any) -> HttpRequest:
    """A request from a Lambda function URL / API Gateway v2 or v1 event; `ValueError` if not."""
    if not isinstance(event, dict):
        raise ValueError("the Lambda event is not an HTTP event")
    http = (event.get("requestContext") or {}).get("http") or {}
    method = http.get("method") or event.get("httpMethod")
    if not isinstance(method, str):
        raise ValueError("the Lambda event has no HTTP method")
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    path = event.get("rawPath") or http.get("path") or event.get("path") or "/"
    return HttpRequest(method.upper(), headers, _event_body(event), str(path).partition("?")[0])


def _event_body(event: dict[str, Any]) -> bytes:
    body = event.get("body") or ""
    if not event.get("isBase64Encoded"):
        return body.encode("utf-8") if isinstance(body, str) else bytes(body)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("the Lambda event body is not valid base64") from exc


def lambda_response(response: HttpResponse) -> dict[str, Any]:
    return {
        "statusCode": response.status,
        "headers": dict(JSON_HEADERS),
        "body": response.encoded().decode("utf-8"),
        "isBase64Encoded": False,
    }
