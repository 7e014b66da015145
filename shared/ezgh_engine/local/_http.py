"""Loopback HTTP plumbing shared by the API bridge and the ASGI server: `ezgh dev`'s front.

The front answers every request, however malformed, with the contract's JSON error shape
within `REQUEST_TIMEOUT_SECONDS`, never a dropped connection, an HTML page or a memory
error: a request line or headers `http.server` cannot parse (400), a `Content-Length` that is
not one number (400), over `MAX_BODY_BYTES` (413, the body left unread), a body shorter than
its length or a request that stops arriving (400 once the timeout passes), a bad chunk
(400). A method the server has no name for (TRACE, PROPFIND, ...) is passed on like any
other, so the API answers it as deployed (405 on a served path). A connection that falls
idle between requests is closed quietly. Log lines name a request by its method and its
path without a query string, with a callback's token replaced (`/v1/callbacks/{token}`).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ezgh_engine.service.callbacks import CALLBACK_PATH

log = logging.getLogger("ezgh.local.http")

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade"}
# Lambda's limit on a request (API Gateway passes at most this to a function).
MAX_BODY_BYTES = 6 * 1024 * 1024
# How long a request may take to arrive (each read waits at most this), and how long a
# keep-alive connection may stay idle between requests.
REQUEST_TIMEOUT_SECONDS = 30.0
_MAX_LINE = 65536
_MAX_TRAILERS = 100
# RFC 9110 `token`: what a method may be made of.
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_CALLBACK = re.compile(re.escape(CALLBACK_PATH) + r"[^/?#]*")


def loggable_path(target: str) -> str:
    """A request target as it may be logged: no query string, no callback token."""
    path = target.split("?", 1)[0].split("#", 1)[0]
    return _CALLBACK.sub(CALLBACK_PATH + "{token}", path)


class RequestRefused(Exception):
    """A request the front answers itself with an error (in the contract's shape)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _malformed(message: str) -> RequestRefused:
    return RequestRefused(400, "validation_error", message)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-answer (its connection reset: an execution environment that a
        stop of `ezgh dev` killed with a request in flight) is a debug line, not a
        traceback on the terminal; anything else is logged with its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            log.debug("a client went away before its answer: %s", type(error).__name__)
            return
        log.error("serving a request failed", exc_info=error)


class BaseHandler(BaseHTTPRequestHandler):
    """One connection: requests parsed and checked here, each then given to `serve(body)`."""

    protocol_version = "HTTP/1.1"  # keep-alive; every answer carries Content-Length
    # The headers and the body leave in two writes: with Nagle's algorithm the body waits for
    # the client's delayed ACK of the headers (~40 ms on Linux) on every keep-alive answer.
    disable_nagle_algorithm = True
    # Each socket read waits at most this (`StreamRequestHandler.setup` applies it).
    timeout = REQUEST_TIMEOUT_SECONDS
    max_body_bytes = MAX_BODY_BYTES

    def serve(self, body: bytes) -> None:
        """Answer one well-formed request (subclasses)."""
        raise NotImplementedError

    def handle_one_request(self) -> None:
        """`BaseHTTPRequestHandler.handle_one_request`, answering what it would drop or
        answer in HTML, and passing every method on."""
        try:
            if not self.rfile.peek(1):  # type: ignore[attr-defined]
                self.close_connection = True  # the client closed between requests
                return
        except (TimeoutError, ConnectionError):
            self.close_connection = True  # idle past the timeout: closed quietly
            return
        self.command, self.requestline, self.request_version = "", "", ""
        try:
            self.raw_requestline = self.rfile.readline(_MAX_LINE + 1)
            if len(self.raw_requestline) > _MAX_LINE:
                raise _malformed("the request line is too long")
            if not self.parse_request():
                return  # answered by `send_error`
            if self.request_version == "HTTP/0.9":  # `GET /`, no version: not served
                raise _malformed("malformed request line")
            if not _METHOD.fullmatch(self.command):
                raise _malformed("the method is not an HTTP token")
            body = self.read_body()
        except RequestRefused as refused:
            self.refuse(refused)
            return
        except TimeoutError:
            timeout = f"the request did not arrive whole within {self.timeout:g} s"
            self.refuse(_malformed(timeout))
            return
        self.serve(body)
        self.wfile.flush()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What `parse_request` refuses (a request line, version or headers it cannot read),
        in the contract's shape, echoing nothing of the request."""
        reasons = {
            414: "the request line is too long",
            431: "the request headers are too large",
            505: "the HTTP version is not supported",
        }
        self.refuse(_malformed(reasons.get(code, "malformed request line or headers")))

    def refuse(self, refused: RequestRefused) -> None:
        """Answer an error and close: what is left of the request cannot be trusted."""
        self.close_connection = True
        # A request line that did not parse leaves HTTP/0.9 (no status line): answer 1.1.
        self.request_version = "HTTP/1.1"
        body = json.dumps({"error": {"code": refused.code, "message": refused.message}}).encode()
        try:
            self.answer(refused.status, [("content-type", "application/json")], body)
            self.wfile.flush()
        except OSError:
            pass  # the client went away: nothing left to tell it
        log.debug(
            "%s %s %s: %s",
            self.command or "-",
            self._loggable_path(),
            refused.status,
            refused.message,
        )

    def read_body(self) -> bytes:
        """The request's body, whole, or `RequestRefused` (or `TimeoutError`)."""
        encoding = self.headers.get("Transfer-Encoding")
        lengths = self.headers.get_all("Content-Length") or []
        if encoding is not None:
            if encoding.strip().lower() != "chunked":
                raise _malformed("Transfer-Encoding must be chunked")
            if lengths:
                raise _malformed("a request may not have both Content-Length and chunks")
            return self._read_chunks()
        if not lengths:
            return b""
        if len(set(lengths)) != 1 or not lengths[0].strip().isdigit():
            raise _malformed("Content-Length must be one number")
        length = int(lengths[0])
        if length > self.max_body_bytes:
            raise self._too_large()
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client closed before sending it all
            raise _malformed("the body is shorter than its Content-Length")
        return body

    def _too_large(self) -> RequestRefused:
        return RequestRefused(
            413, "payload_too_large", f"the body is larger than {self.max_body_bytes} bytes"
        )

    def _read_chunks(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(_MAX_LINE + 1)
            size_text = line.split(b";", 1)[0].strip()
            if len(line) > _MAX_LINE or not _CHUNK_SIZE.fullmatch(size_text):
                raise _malformed("malformed chunk size")
            size = int(size_text, 16)
            if size == 0:
                break
            total += size
            if total > self.max_body_bytes:
                raise self._too_large()
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _malformed("a chunk is shorter than its size")
            chunks.append(chunk)
        for _ in range(_MAX_TRAILERS):
            trailer = self.rfile.readline(_MAX_LINE + 1)
            if trailer in (b"\r\n", b"\n"):
                return b"".join(chunks)
            if not trailer or len(trailer) > _MAX_LINE:
                break
        raise _malformed("malformed chunk trailers")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.debug("%s %s %s", self.command or "-", self._loggable_path(), code)

    def _loggable_path(self) -> str:
        path = getattr(self, "path", "")  # set only once the request line parsed
        return loggable_path(path) if path else "-"

    def log_message(self, format: str, *args: Any) -> None:
        # `http.server`'s own messages may quote the request (its path, a token): not logged.
        log.debug("%s: http.server reported a problem", self.address_string())

    def answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            # Content-Length is ours to write: the body may have been re-encoded.
            if name.lower() in _HOP_BY_HOP or name.lower() == "content-length":
                continue
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
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
