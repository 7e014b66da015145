"""A tiny threaded HTTP/1.1 server for an ASGI 3 app (the SDK's `PushApp`).

Requests are parsed on server threads; the app runs on one event loop thread, as under
uvicorn, so an app may share async clients across requests. The whole response is buffered
and sent with a Content-Length (push apps answer small JSON documents). Lifespan events are
sent in uvicorn's "auto" mode: an app that does not speak lifespan is fine.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from ezgh_engine.local._http import BaseHandler, ServedHttp, Server

log = logging.getLogger("ezgh.local.asgi")

AsgiApp = Callable[..., Awaitable[None]]
_TIMEOUT = 900.0  # as long as an invoker may wait on an app


class DropConnection(Exception):
    """Raised by an app to have its connection closed without an answer (a process that died
    mid-request; `local.faults` uses it)."""


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Awaitable[Any], timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class _Lifespan:
    """One lifespan call for the app's life: `startup` now, `shutdown` at the end.

    Like uvicorn's "auto" mode: an app that raises on a lifespan scope does not support it,
    and that is fine.
    """

    def __init__(self, app: AsgiApp) -> None:
        self.app = app
        self.supported = True
        self._incoming: asyncio.Queue[dict[str, Any]] | None = None
        self._acks: asyncio.Queue[str] | None = None
        self._task: asyncio.Future[Any] | None = None

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._acks is not None
        if message["type"].endswith(".failed"):
            log.error("app %s: %s", message["type"], message.get("message", ""))
        await self._acks.put(message["type"])

    async def _event(self, kind: str) -> None:
        assert self._incoming is not None and self._acks is not None and self._task is not None
        await self._incoming.put({"type": f"lifespan.{kind}"})
        ack = asyncio.ensure_future(self._acks.get())
        await asyncio.wait({ack, self._task}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if not ack.done():
            ack.cancel()
            if self._task.done() and self._task.exception() is not None:
                self.supported = False
                log.debug("app does not support lifespan: %r", self._task.exception())

    async def startup(self) -> None:
        self._incoming, self._acks = asyncio.Queue(), asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self._task = asyncio.ensure_future(self.app(scope, self._incoming.get, self._send))
        await self._event("startup")

    async def shutdown(self) -> None:
        if self.supported and self._task is not None and not self._task.done():
            await self._event("shutdown")
        if self._task is not None and not self._task.done():
            self._task.cancel()


async def _call(
    app: AsgiApp, scope: dict[str, Any], body: bytes
) -> tuple[int, list[tuple[str, str]], bytes]:
    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []
    started = False
    finished = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()  # the client "disconnects" once the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, headers, started
        if message["type"] == "http.response.start":
            started = True
            status = int(message["status"])
            headers = [
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])
            ]
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                finished.set()

    try:
        await app(scope, receive, send)
    except DropConnection:
        raise
    except Exception:
        log.exception("ASGI app raised")
        if not started:
            return 500, [("content-type", "text/plain")], b"Internal Server Error"
    finished.set()
    return status, headers, b"".join(chunks)


def serve_asgi(app: AsgiApp, host: str = "127.0.0.1", port: int = 0) -> ServedHttp:
    """Serve `app` on `host:port` (0: a free port) until `.shutdown()`; `.url` is its base URL."""
    loop = _LoopThread(f"asgi-loop-{id(app):x}")
    lifespan = _Lifespan(app)
    loop.run(lifespan.startup(), timeout=15)

    class Handler(BaseHandler):
        def serve(self, body: bytes) -> None:
            path, _, query = self.path.partition("?")
            address: Any = self.server.server_address
            server_host, server_port = address[0], address[1]
            scope = {
                "type": "http",
                "asgi": {"version": "3.0", "spec_version": "2.3"},
                "http_version": "1.1",
                "method": self.command,
                "scheme": "http",
                "path": unquote(path),
                "raw_path": path.encode("latin-1"),
                "query_string": query.encode("latin-1"),
                "root_path": "",
                "headers": [
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in self.headers.items()
                ],
                "client": (self.client_address[0], self.client_address[1]),
                "server": (str(server_host), int(server_port)),
                "state": {},
            }
            try:
                status, headers, raw = loop.run(_call(app, scope, body), timeout=_TIMEOUT)
            except DropConnection:
                self.close_connection = True  # no answer: the client sees the connection end
                return
            except Exception:
                log.exception("ASGI request failed")
                status, headers, raw = (
                    500,
                    [("content-type", "text/plain")],
                    b"Internal Server Error",
                )
            self.answer(status, headers, raw)

    def stop_loop() -> None:
        try:
            loop.run(lifespan.shutdown(), timeout=15)
        finally:
            loop.stop()

    try:
        server = Server((host, port), Handler)
    except Exception:
        loop.stop()
        raise
    return ServedHttp(server, on_shutdown=stop_loop).serve()
