"""HTTP on loopback: API Gateway (HTTP API, payload v2.0) in front of the api handler, and a
minimal HTTP/1.1 server for ASGI apps (the SDK's `PushApp`) so `ezgh dev` needs no uvicorn.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from datetime import UTC
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ezgh_engine import clock, ids
from ezgh_engine.local._http import REQUEST_TIMEOUT_SECONDS, BaseHandler, ServedHttp, Server
from ezgh_engine.local.asgi import serve_asgi
from ezgh_engine.local.emulator import ACCOUNT_ID
from ezgh_engine.local.environments import FunctionTimedOut

__all__ = ["ServedHttp", "api_gateway_event", "serve_api", "serve_asgi"]

log = logging.getLogger("ezgh.local.http")

Invoke = Callable[[dict[str, Any]], Any]
API_ID = "ezghlocal"


# --- API Gateway HTTP API (payload format 2.0) -------------------------------------------


def api_gateway_event(
    *,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes,
    source_ip: str,
    host: str,
) -> dict[str, Any]:
    """The event API Gateway's HTTP API (payload 2.0, `$default` route) gives a Lambda."""
    parts = urlsplit(target)
    joined: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        joined[key] = f"{joined[key]},{value}" if key in joined else value
    query: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        query[name] = f"{query[name]},{value}" if name in query else value
    now = clock.now()
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path or "/",
        "rawQueryString": parts.query,
        "headers": joined,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": API_ID,
            "domainName": host,
            "domainPrefix": host.split(".")[0],
            "http": {
                "method": method,
                "path": parts.path or "/",
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": joined.get("user-agent", ""),
            },
            "requestId": ids.new_id(),
            "routeKey": "$default",
            "stage": "$default",
            "time": now.astimezone(UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": clock.now_ms(),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = query
    if body:
        try:
            event["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
    return event


def _lambda_answer(result: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """Turn a handler's answer into status, headers and body, as API Gateway does."""
    if not isinstance(result, dict) or "statusCode" not in result:
        # Payload 2.0: anything else is a 200 JSON body.
        return 200, [("content-type", "application/json")], json.dumps(result).encode()
    headers = [(k, str(v)) for k, v in (result.get("headers") or {}).items()]
    for name, values in (result.get("multiValueHeaders") or {}).items():
        headers.extend((name, str(v)) for v in values)
    headers.extend(("set-cookie", c) for c in result.get("cookies") or [])
    body = result.get("body") or ""
    raw = base64.b64decode(body) if result.get("isBase64Encoded") else str(body).encode()
    return int(result["statusCode"]), headers, raw


def serve_api(
    invoke: Invoke,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    track: Callable[[], Any] | None = None,
    timeout: float = REQUEST_TIMEOUT_SECONDS,
) -> ServedHttp:
    """Bind (not yet serve) the API Gateway bridge; call `.serve()` on the answer to start.

    Binding first lets the runtime know its URL before the handlers' environment is set.
    `track` is a context-manager factory counting requests in flight (for `wait_idle`);
    `timeout`: how long a request may take to arrive (`local._http`).
    """

    class Handler(BaseHandler):
        def serve(self, body: bytes) -> None:
            event = api_gateway_event(
                method=self.command,
                target=self.path,
                headers=list(self.headers.items()),
                body=body,
                source_ip=self.client_address[0],
                host=self.headers.get("Host", f"{host}:{port}"),
            )
            try:
                if track is not None:
                    with track():
                        result = invoke(event)
                else:
                    result = invoke(event)
                status, headers, raw = _lambda_answer(result)
            except FunctionTimedOut as timed_out:
                # A Lambda timeout behind API Gateway: a gateway timeout, in the API's shape.
                log.warning("%s", timed_out)
                error = {"code": "internal_error", "message": "the function timed out"}
                status, headers, raw = (
                    504,
                    [("content-type", "application/json")],
                    json.dumps({"error": error}).encode(),
                )
            except Exception:
                log.exception("api handler raised")
                # What API Gateway answers when the integration fails.
                status, headers, raw = (
                    500,
                    [("content-type", "application/json")],
                    (b'{"message":"Internal Server Error"}'),
                )
            self.answer(status, headers, raw)

    Handler.timeout = timeout
    return ServedHttp(Server((host, port), Handler))
