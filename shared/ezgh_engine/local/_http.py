"""Loopback HTTP plumbing shared by the API bridge and the ASGI server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("ezgh.local.http")

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade"}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class BaseHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every answer carries Content-Length
    # The headers and the body leave in two writes: with Nagle's algorithm the body waits for
    # the client's delayed ACK of the headers (~40 ms on Linux) on every keep-alive answer.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            # Content-Length is ours to write: the body may have been re-encoded.
            if name.lower() in _HOP_BY_HOP or name.lower() == "content-length":
                continue
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class ServedHttp:
    """A running loopback server: `.url`, `.port`, `.shutdown()`."""

    def __init__(self, server: Server, on_shutdown: Callable[[], None] | None = None) -> None:
        self._server = server
        self._on_shutdown = on_shutdown
        self.port: int = server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None

    def serve(self) -> ServedHttp:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name=f"http-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def shutdown(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        self._server.server_close()
        if self._on_shutdown is not None:
            self._on_shutdown()
