"""The local runtime's public doors, through its real front and execution environments: every
path of the OpenAPI document answers an unknown method with the contract's JSON 405 (never
the HTML 501 `http.server` wrote), a malformed request with a JSON 400/413, and the steps
function's URL refuses junk (another path, another method, no or a forged token) with a JSON
error. tests/local/test_http_front.py covers each malformed request one by one."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
from ezgh_engine.local.runtime import LocalRuntime

pytestmark = pytest.mark.e2e

UNKNOWN = ("TRACE", "PROPFIND")


def _concrete(path: str, engine: LocalRuntime) -> str:
    values = {"orgId": engine.org_id, "projectId": engine.project_id}
    for part in path.split("/"):
        if part.startswith("{") and part.endswith("}"):
            path = path.replace(part, values.get(part[1:-1], "x1"))
    return path


def _contract_error(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text[:300]
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code


def test_every_documented_path_answers_an_unknown_method_405(engine: LocalRuntime) -> None:
    document = httpx.get(f"{engine.api_url}/v1/openapi.json").json()
    with httpx.Client(base_url=engine.api_url) as client:
        for path in document["paths"]:
            for method in UNKNOWN:
                answer = client.request(method, _concrete(path, engine))
                _contract_error(answer, 405, "method_not_allowed")


def _raw(url: str, data: bytes) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        conn.sendall(data)
        raw = b""
        while chunk := conn.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /v1/health HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 400),
        (b"POST /v1/health HTTP/1.1\r\nContent-Length: 107374182400\r\n\r\n", 413),
        (b"POST /v1/health HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
    ],
)
def test_the_runtime_front_answers_malformed_requests_in_json(
    engine: LocalRuntime, request_bytes: bytes, status: int
) -> None:
    got, body = _raw(engine.api_url, request_bytes)
    assert got == status and set(body["error"]) == {"code", "message"}, body


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/", {}, 404),
        ("TRACE", "/v1/invocations/steps", {}, 405),
        ("POST", "/v1/invocations/steps", {}, 401),
        ("POST", "/v1/invocations/steps", {"Authorization": "Bearer e30.Zm9yZ2Vk"}, 401),
    ],
)
def test_the_steps_url_refuses_junk(
    engine: LocalRuntime, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    steps = engine.url_servers["steps"].url
    answer = httpx.request(method, steps + path, headers=headers, content=b"{" * 5000)
    _contract_error(
        answer, status, {401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}[status]
    )
