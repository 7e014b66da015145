"""A push app's answer is read up to Lambda's 6 MB and no further (`push.pinned_post`).

Before, the invoker read a push app's whole answer into memory, however large: a hostile
or broken app could make it buffer gigabytes. Now the body is read as it arrives and the
delivery fails, naming the contract's `payload_too_large`, once it passes
`sizes.LAMBDA_PAYLOAD_BYTES` on the wire or decoded (a small gzip body that expands without
bound), or at once when its Content-Length says so. A real app on loopback answers here.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import push
from ezgh_engine.core.models import App
from ezgh_engine.core.sizes import LAMBDA_PAYLOAD_BYTES

pytestmark = pytest.mark.moto_only("the engine's HTTP to a push app: no DynamoDB call")

CHUNK = 256 * 1024
ENDLESS_BYTES = 64 * 1024 * 1024  # what the endless app would send if it were read


class _Served:
    sent = 0  # bytes the app managed to send before the engine stopped reading


def _app_server(answer: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            # The engine stopped reading (what a capped read does): the app's writes fail.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                answer(self)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/app"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _endless(handler: BaseHTTPRequestHandler) -> None:
    """200 with a chunked body that goes on for 64 MB: `{"outcome": "completed", ...`."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    piece = b'{"outcome":"completed","output":"' + b"x" * CHUNK
    while _Served.sent < ENDLESS_BYTES:
        handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        _Served.sent += len(piece)
        piece = b"x" * CHUNK
    handler.wfile.write(b"0\r\n\r\n")


def _fixed(body: bytes, **headers: str) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", headers.pop("length", str(len(body))))
        for name, value in headers.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.end_headers()
        handler.wfile.write(body)

    return answer


@pytest.fixture
def serve(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., App]]:
    monkeypatch.setenv(config.ENV_ALLOW_LOOPBACK, "1")  # `ezgh dev`: a loopback app
    config.reset_settings()
    servers: list[Iterator[str]] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> App:
        served = _app_server(answer)
        servers.append(served)
        url = next(served)
        return App(
            id="a",
            slug="wfa_x",
            org_id="o",
            project_id="p",
            name="big",
            kind="push",
            url=url,
            status="synced",
            workflows=("wf",),
            signing_key="k",
            created_at=clock.iso(clock.now()),
        )

    yield start
    for served in servers:
        next(served, None)
    config.reset_settings()


def _deliver(app: App) -> dict[str, Any]:
    return push.invoke_app(app, {"type": "probe"})


def test_an_endless_answer_fails_the_delivery_without_reading_it(serve: Any) -> None:
    _Served.sent = 0
    with pytest.raises(push.AppUnreachable, match="payload_too_large") as failed:
        _deliver(serve(_endless))
    assert f"more than {LAMBDA_PAYLOAD_BYTES} bytes" in failed.value.message
    assert "127.0.0.1" in failed.value.message and "/app" not in failed.value.message
    # The engine stopped reading at the cap: the app could not send the rest (at most the
    # cap and what the sockets' buffers took besides).
    assert _Served.sent < ENDLESS_BYTES // 2


def test_an_answer_whose_length_says_it_is_too_large_is_not_read(serve: Any) -> None:
    body = b"{}"
    with pytest.raises(push.AppUnreachable, match="payload_too_large"):
        _deliver(serve(_fixed(body, length=str(LAMBDA_PAYLOAD_BYTES + 1))))


def test_a_compressed_answer_that_expands_past_the_cap_fails(serve: Any) -> None:
    output = "0" * (LAMBDA_PAYLOAD_BYTES + CHUNK)  # 6.25 MB of zeros: about 6 KB gzipped
    bomb = gzip.compress(json.dumps({"outcome": "completed", "output": output}).encode())
    assert len(bomb) < 100_000
    with pytest.raises(push.AppUnreachable, match="payload_too_large"):
        _deliver(serve(_fixed(bomb, Content_Encoding="gzip")))


def test_answers_within_the_cap_are_read_whole_plain_or_compressed(serve: Any) -> None:
    answer = {"outcome": "completed", "output": "y" * (LAMBDA_PAYLOAD_BYTES - 1000)}
    raw = json.dumps(answer).encode()
    assert len(raw) <= LAMBDA_PAYLOAD_BYTES
    assert _deliver(serve(_fixed(raw))) == answer
    assert _deliver(serve(_fixed(gzip.compress(raw), Content_Encoding="gzip"))) == answer
