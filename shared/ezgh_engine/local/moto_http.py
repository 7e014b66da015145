"""moto's server on loopback with keep-alive connections.

moto serves its app through werkzeug's development server, which answers every request with
`Connection: close` (its handler cannot tell where a request body ends, so it drains the
socket for 10 ms after each answer and closes it). Every AWS call of every handler then paid
a TCP connection, a new server thread and that wait: under `bench.throughput` the runtime
process started a thread per request. `KeepAliveMotoHandler` reads each request's body
whole first (Content-Length or chunked), so the connection is left at the next request,
and answers with a Content-Length: botocore's pooled connections stay open. The app, the
environ (moto's own `make_environ`) and the answers are moto's.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

log = logging.getLogger("ezgh.local.moto_http")

# Answers that carry no body whatever their headers say (RFC 9110): their Content-Length,
# if any, is the app's (S3's HeadObject gives the object's size).
_BODILESS_STATUS = {204, 304}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class KeepAliveMotoHandler(MotoRequestHandler):
    """moto's request handler, keeping the connection open between requests."""

    protocol_version = "HTTP/1.1"
    # The headers and the body leave in two writes: with Nagle's algorithm the body would
    # wait for the client's delayed ACK of the headers (~40 ms) on a kept connection.
    disable_nagle_algorithm = True

    def run_wsgi(self) -> None:
        """Serve one request: read its body whole, call the app, answer with a length."""
        environ = self.make_environ()
        body = self._read_body(environ)
        if body is None:  # the client went away mid-request: nothing to serve
            self.close_connection = True
            return
        environ["wsgi.input"] = io.BytesIO(body)
        status, headers, answer = self._call_app(environ)
        self._answer(status, headers, answer)

    def _read_body(self, environ: dict[str, Any]) -> bytes | None:
        """The request's whole body (b"" without one), or None if the stream ended first."""
        if environ.get("wsgi.input_terminated"):  # chunked: werkzeug's `DechunkedInput`
            return bytes(environ["wsgi.input"].read())
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True  # where this body ends is unknown
            return b""
        body = self.rfile.read(length) if length else b""
        return body if len(body) == length else None

    def _call_app(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        started: list[Any] = []
        written: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            if started and not exc_info:
                raise AssertionError("Headers already set")
            started[:] = [status, headers]
            return written.append

        try:
            answer: Iterable[bytes] = self.server.app(environ, start_response)
            try:
                written.extend(answer)
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
        except Exception:
            # What werkzeug's server does (it renders an InternalServerError page).
            log.exception("moto raised on %s %s", self.command, self.path)
            body = b"Internal Server Error"
            return "500 INTERNAL SERVER ERROR", [("Content-Type", "text/plain")], body
        if not started:
            raise AssertionError("the app answered without start_response")
        return str(started[0]), list(started[1]), b"".join(written)

    def _answer(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        code_text, _, message = status.partition(" ")
        code = int(code_text)
        bodiless = self.command == "HEAD" or code in _BODILESS_STATUS or code < 200
        self.send_response(code, message)
        for name, value in headers:
            lowered = name.lower()
            if lowered in _HOP_BY_HOP and not (bodiless and lowered == "content-length"):
                continue
            self.send_header(name, value)
        if not bodiless:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not bodiless and body:
            self.wfile.write(body)


class MotoServer(ThreadedMotoServer):
    """`ThreadedMotoServer` with keep-alive connections (`KeepAliveMotoHandler`), serving
    `app` (a WSGI app wrapping moto's, as `local.persistence` journals) or moto's own."""

    def __init__(self, ip_address: str, port: int, app: Any = None) -> None:
        super().__init__(ip_address=ip_address, port=port, verbose=False)
        self._app = app

    def _server_entry(self) -> None:
        app = (
            self._app if self._app is not None else DomainDispatcherApplication(create_backend_app)
        )
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=KeepAliveMotoHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()
