"""The API Gateway bridge and the ASGI server, over real loopback HTTP."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
from ezgh_engine.local.http_bridge import serve_api, serve_asgi


def test_api_gateway_v2_event_round_trip() -> None:
    events: list[dict[str, Any]] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        events.append(event)
        return {
            "statusCode": 201,
            "headers": {"content-type": "application/octet-stream", "x-one": "1"},
            "cookies": ["a=1; Path=/", "b=2"],
            "body": base64.b64encode(b"\x00\xffbin").decode(),
            "isBase64Encoded": True,
        }

    server = serve_api(invoke).serve()
    try:
        answer = httpx.post(
            f"{server.url}/v1/things/x%20y?b=2&a=1&a=3",
            content=b"\xff\xfe not utf-8",
            headers=[
                ("X-Multi", "one"),
                ("X-Multi", "two"),
                ("Cookie", "c1=v1; c2=v2"),
                ("User-Agent", "tests/1"),
            ],
        )
    finally:
        server.shutdown()
    assert answer.status_code == 201
    assert answer.content == b"\x00\xffbin"
    assert answer.headers["x-one"] == "1"
    assert answer.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2"]

    event = events[0]
    assert event["version"] == "2.0" and event["routeKey"] == "$default"
    assert event["rawPath"] == "/v1/things/x%20y"
    assert event["rawQueryString"] == "b=2&a=1&a=3"
    assert event["queryStringParameters"] == {"a": "1,3", "b": "2"}
    assert event["cookies"] == ["c1=v1", "c2=v2"]
    assert event["headers"]["x-multi"] == "one,two"
    assert "cookie" not in event["headers"]
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b"\xff\xfe not utf-8"
    context = event["requestContext"]
    assert context["http"] == {
        "method": "POST",
        "path": "/v1/things/x%20y",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": "tests/1",
    }
    assert context["stage"] == "$default" and context["routeKey"] == "$default"
    assert context["requestId"] and isinstance(context["timeEpoch"], int)
    assert context["domainName"].startswith("127.0.0.1:")


def test_api_text_body_and_handler_crash() -> None:
    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        if event["rawPath"] == "/boom":
            raise RuntimeError("boom")
        return {"statusCode": 200, "body": event.get("body", "")}

    server = serve_api(invoke).serve()
    try:
        with httpx.Client(base_url=server.url) as client:  # keep-alive across requests
            ok = client.post("/echo", json={"k": "é"})
            crash = client.get("/boom")
            again = client.get("/echo")
    finally:
        server.shutdown()
    assert ok.status_code == 200 and ok.json() == {"k": "é"}
    assert crash.status_code == 500 and crash.json() == {"message": "Internal Server Error"}
    assert "Traceback" not in crash.text
    assert again.status_code == 200


class EchoApp:
    """A small ASGI 3 app that speaks lifespan and echoes requests."""

    def __init__(self) -> None:
        self.lifespan: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                self.lifespan.append(message["type"])
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = json.dumps(
            {
                "method": scope["method"],
                "path": scope["path"],
                "query": scope["query_string"].decode(),
                "body": body.decode(),
                "signature": dict(scope["headers"]).get(b"x-sig", b"").decode(),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 202,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer[:5], "more_body": True})
        await send({"type": "http.response.body", "body": answer[5:]})


def test_serve_asgi() -> None:
    app = EchoApp()
    served = serve_asgi(app)
    assert app.lifespan == ["lifespan.startup"]
    try:
        answer = httpx.post(
            f"{served.url}/invoke/a%2Fb?x=1", content=b'{"a":1}', headers={"X-Sig": "s1"}
        )
    finally:
        served.shutdown()
    assert app.lifespan == ["lifespan.startup", "lifespan.shutdown"]
    assert answer.status_code == 202
    assert answer.json() == {
        "method": "POST",
        "path": "/invoke/a/b",
        "query": "x=1",
        "body": '{"a":1}',
        "signature": "s1",
    }


def test_serve_asgi_without_lifespan_and_app_error() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError("no lifespan here")
        raise RuntimeError("broken app")

    served = serve_asgi(app)
    try:
        answer = httpx.get(f"{served.url}/")
    finally:
        served.shutdown()
    assert answer.status_code == 500
