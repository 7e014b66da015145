"""`local.loopback`: the runtime's own calls to its servers, on loopback only."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ezgh_engine.local import loopback


class _Echo(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = json.dumps(
            {"path": self.path, "key": self.headers["Authorization"], "got": json.loads(body)}
        ).encode()
        self.send_response(201)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[str]:
    served = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=served.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{served.server_address[1]}"
    served.shutdown()
    served.server_close()


def test_a_call_sends_its_json_and_headers_and_answers_status_and_body(server: str) -> None:
    answer = loopback.request(
        "POST", f"{server}/v1/apps?x=1", headers={"Authorization": "Bearer k"}, json_body={"a": 1}
    )
    assert answer.status == 201
    assert answer.json() == {"path": "/v1/apps?x=1", "key": "Bearer k", "got": {"a": 1}}


@pytest.mark.parametrize(
    "url", ["http://example.invalid/v1/health", "https://127.0.0.1:1/v1/health", "file:///etc"]
)
def test_nothing_but_loopback_http_is_called(url: str) -> None:
    with pytest.raises(ValueError, match="not a loopback http URL"):
        loopback.request("GET", url)
