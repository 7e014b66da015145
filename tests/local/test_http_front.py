"""`ezgh dev`'s HTTP front (`local/_http.py`, the API bridge and the ASGI server) against
malformed requests, sent byte by byte on a raw socket: each gets a JSON error in the
contract's shape, never a dropped connection, an HTML page or a memory error; a request that
stops arriving gets one once the front's timeout passes (lowered here, so the test is quick,
not timed); log lines carry no callback token and no query string.

The API behind the front is the real api handler, in this thread (these requests need no AWS).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from ezgh_engine.local._http import loggable_path
from ezgh_engine.local.asgi import serve_asgi
from ezgh_engine.local.http_bridge import ServedHttp, serve_api

from tests.api.conftest import LambdaContext

TIMEOUT = 0.5  # the front's request timeout in these tests


def _api(event: dict[str, Any]) -> Any:
    from functions.api.handler import handler

    return handler(event, LambdaContext())


@pytest.fixture(scope="module")
def front() -> Iterator[ServedHttp]:
    served = serve_api(_api, timeout=TIMEOUT).serve()
    yield served
    served.shutdown()


def exchange(
    served: ServedHttp, *parts: bytes, wait: bool = True
) -> tuple[int, dict[str, str], Any]:
    """Send `parts` on a new connection; read the answer until the server closes it or its
    Content-Length is in. (status, headers, JSON body)."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as conn:
        for part in parts:
            conn.sendall(part)
        raw = b""
        while True:
            head, sep, rest = raw.partition(b"\r\n\r\n")
            if sep:
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
                }
                if len(rest) >= int(headers.get("content-length", "0")):
                    status = int(lines[0].split()[1])
                    length = int(headers.get("content-length", "0"))
                    return status, headers, json.loads(rest[:length]) if length else None
            data = conn.recv(65536)
            if not data:
                raise AssertionError(f"the connection was dropped after {raw[:300]!r}")
            raw += data


def _is_error(answer: tuple[int, dict[str, str], Any], status: int, code: str) -> None:
    got, headers, body = answer
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code


def _post(length: str, body: bytes = b"") -> bytes:
    return (
        f"POST /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode() + body
    )


@pytest.mark.parametrize("length", ["abc", "-1", "1, 2", "0x10", "1e3", " "])
def test_a_bad_content_length_is_400(front: ServedHttp, length: str) -> None:
    _is_error(exchange(front, _post(length, b"{}")), 400, "validation_error")


def test_two_content_lengths_that_differ_are_400(front: ServedHttp) -> None:
    request = b"POST /v1/health HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
    _is_error(exchange(front, request), 400, "validation_error")


def test_a_100_gb_body_is_413_before_it_is_read(front: ServedHttp) -> None:
    answer = exchange(front, _post(str(100 * 1024**3)))
    _is_error(answer, 413, "payload_too_large")
    assert answer[1]["connection"] == "close"


def test_a_short_body_is_400_once_the_timeout_passes(front: ServedHttp) -> None:
    _is_error(exchange(front, _post("100", b'{"a": 1')), 400, "validation_error")


def test_a_request_that_stops_midway_is_400(front: ServedHttp) -> None:
    _is_error(exchange(front, b"POST /v1/health HTTP/1.1\r\nHost"), 400, "validation_error")


@pytest.mark.parametrize(
    "chunks",
    [
        b"zz\r\n{}\r\n0\r\n\r\n",  # not hex
        b"-2\r\n{}\r\n0\r\n\r\n",
        b"\r\n",  # no size
        b"5\r\n{}\r\n0\r\n\r\n",  # shorter than its size
        b"2\r\n{}XX0\r\n\r\n",  # no CRLF after the chunk
        b"ffffffffffffffffffff\r\n",  # a size past any limit
    ],
)
def test_a_bad_chunk_is_400(front: ServedHttp, chunks: bytes) -> None:
    head = b"POST /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    _is_error(exchange(front, head + chunks), 400, "validation_error")


def test_chunks_over_the_limit_are_413(front: ServedHttp) -> None:
    head = b"POST /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    _is_error(exchange(front, head + b"7fffffff\r\n"), 413, "payload_too_large")


def test_length_and_chunks_together_are_400(front: ServedHttp) -> None:
    request = (
        b"POST /v1/health HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n"
    )
    _is_error(exchange(front, request), 400, "validation_error")


def test_good_chunks_reach_the_api(front: ServedHttp) -> None:
    head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    status, _, body = exchange(front, head + b"1\r\n{\r\n1;ext=1\r\n}\r\n0\r\nX-T: 1\r\n\r\n")
    assert (status, body) == (200, {"status": "ok"})


@pytest.mark.parametrize(
    "request_line",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /v1/health HTTP/9.9\r\n\r\n",
        b"GET /v1/health FTP/1.1\r\n\r\n",
        b"G(E)T /v1/health HTTP/1.1\r\n\r\n",
        b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n",
        b"GET /v1/health HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n",
        b"GET /v1/health HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n",
    ],
)
def test_what_http_server_cannot_parse_is_400_json(front: ServedHttp, request_line: bytes) -> None:
    _is_error(exchange(front, request_line), 400, "validation_error")


@pytest.mark.parametrize("method", ["TRACE", "PROPFIND", "MKCOL", "BREW", "PUT", "DELETE"])
def test_an_unknown_method_is_the_apis_405(front: ServedHttp, method: str) -> None:
    answer = exchange(front, f"{method} /v1/health HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    _is_error(answer, 405, "method_not_allowed")
    assert answer[1]["allow"] == "GET"


def test_an_idle_connection_is_closed_quietly(front: ServedHttp) -> None:
    with socket.create_connection(("127.0.0.1", front.port), timeout=30) as conn:
        conn.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while b'"ok"}' not in first:
            first += conn.recv(65536)
        assert conn.recv(65536) == b""  # no unsolicited answer: the client may reuse it


def test_the_asgi_front_refuses_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise RuntimeError("no lifespan")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    served = serve_asgi(app)
    try:
        _is_error(exchange(served, _post("nope")), 400, "validation_error")
        _is_error(exchange(served, _post(str(10**12))), 413, "payload_too_large")
        _is_error(exchange(served, b"NOT HTTP\r\n\r\n"), 400, "validation_error")
    finally:
        served.shutdown()


def test_log_lines_name_no_token_and_no_query(caplog: pytest.LogCaptureFixture) -> None:
    token = "cbSECRETtoken0123456789abcdefghijklmnopqrstu"
    served = serve_api(lambda event: {"statusCode": 404, "body": "{}"}).serve()
    try:
        with caplog.at_level(logging.DEBUG, logger="ezgh.local.http"):
            request = f"POST /v1/callbacks/{token}?k=QUERYSECRET HTTP/1.1\r\n\r\n"
            exchange(served, request.encode())
            exchange(served, f"GET /v1/callbacks/{token} HTTP/9\r\n\r\n".encode())
            bad_length = _post("x").replace(b"/v1/health", f"/v1/callbacks/{token}".encode())
            exchange(served, bad_length)
    finally:
        served.shutdown()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "/v1/callbacks/{token}" in text
    assert token not in text and "QUERYSECRET" not in text


def test_loggable_path() -> None:
    assert loggable_path("/v1/callbacks/abc?x=1") == "/v1/callbacks/{token}"
    assert loggable_path("/v1/organizations/o/projects/p/runs?cursor=c") == (
        "/v1/organizations/o/projects/p/runs"
    )


@pytest.mark.parametrize("front_kind", ["api bridge", "asgi"])
def test_a_client_gone_before_its_answer_is_no_traceback(front_kind: str, capfd: Any) -> None:
    """A stop of `ezgh dev` kills execution environments mid-request: the front then writes
    its answer to a connection reset by its peer. That is the client's going, said in a
    debug line, not a `ConnectionResetError` traceback on the terminal (socketserver's
    `handle_error` printed one for each)."""
    import struct
    import threading

    answering = threading.Event()
    gone = threading.Event()

    def slow(event: dict[str, Any]) -> Any:
        answering.set()
        gone.wait(10)  # answer only once the client has reset the connection
        return {"statusCode": 200, "headers": {}, "body": "x" * 1_000_000}

    async def slow_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        answering.set()
        gone.wait(10)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * 1_000_000})

    served = serve_api(slow).serve() if front_kind == "api bridge" else serve_asgi(slow_app)
    try:
        for _ in range(3):
            answering.clear()
            gone.clear()
            conn = socket.create_connection(("127.0.0.1", served.port), timeout=30)
            conn.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answering.wait(10)
            # A process killed with a request in flight: its socket is reset, not closed.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            gone.set()
        probe = socket.create_connection(("127.0.0.1", served.port), timeout=30)
        probe.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        gone.set()
        assert probe.recv(64).startswith(b"HTTP/1.1 200")  # still serving
        probe.close()
    finally:
        served.shutdown()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err, err
    assert "BrokenPipeError" not in err, err
