"""moto's server on loopback, each connection served by a reused thread.

moto's development server (werkzeug's) answers every request with `Connection: close`, so
every AWS call of every handler and poller is a connection of its own, and werkzeug's
threaded server starts a new thread for each: under `ezgh dev`'s throughput bench the
accepting thread's `Thread.start`, `Thread.__init__` and reaping were about a seventh of the
runtime process's CPU. Here a connection goes to an idle worker thread, and a new worker
starts only when none is idle: as many threads as connections at once, as before, each
serving one connection at a time, as before; only their creation is saved. (Keeping the
connections open instead was tried and left out twice: docs/benchmarks.md.)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from werkzeug.serving import ThreadedWSGIServer

_STOP = None  # a worker's cue to end (the server closed)


class PooledWSGIServer(ThreadedWSGIServer):
    """werkzeug's threaded WSGI server, with its per-connection threads reused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()
        self._pool_lock = threading.Condition()
        self._idle = 0  # workers waiting with no connection promised to them
        self.workers: list[threading.Thread] = []

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._pool_lock:
            if self._idle:
                self._idle -= 1  # that worker's next connection is this one
            else:
                worker = threading.Thread(
                    target=self._work, name=f"moto-worker-{len(self.workers)}", daemon=True
                )
                self.workers.append(worker)
                worker.start()
        self._pending.put((request, client_address))

    def _work(self) -> None:
        while True:
            item = self._pending.get()
            if item is _STOP:
                return
            request, client_address = item
            self.process_request_thread(request, client_address)  # handles, then closes
            with self._pool_lock:
                self._idle += 1
                self._pool_lock.notify_all()

    def wait_idle_workers(self, count: int, timeout: float | None = None) -> bool:
        """Wait until `count` workers are idle (tests: a connection just answered has its
        worker back in the pool)."""
        with self._pool_lock:
            return self._pool_lock.wait_for(lambda: self._idle >= count, timeout)

    def server_close(self) -> None:
        super().server_close()
        with self._pool_lock:
            workers, self._idle = len(self.workers), 0
        for _ in range(workers):  # a worker mid-connection ends after it
            self._pending.put(_STOP)


class MotoServer:
    """moto's server (its WSGI app, or one wrapping it) on `ip_address:port` in a thread of
    its own: `start()`, `get_host_and_port()`, `stop()`, as moto's `ThreadedMotoServer`."""

    def __init__(
        self,
        ip_address: str,
        port: int,
        app: Callable[..., Any] | None = None,
        gate: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    ) -> None:
        """`gate` wraps the app (`local.emulator_gate`): what the socket serves."""
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        self._app = app or DomainDispatcherApplication(create_backend_app)
        if gate is not None:
            self._app = gate(self._app)
        self._address = (ip_address, port)
        self._server: PooledWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from moto.moto_server.werkzeug_app import MotoRequestHandler

        self._server = PooledWSGIServer(
            self._address[0], self._address[1], self._app, MotoRequestHandler
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="moto-server", daemon=True
        )
        self._thread.start()

    @property
    def server(self) -> PooledWSGIServer | None:
        """The WSGI server while started."""
        return self._server

    def get_host_and_port(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the server is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join()
        self._server.server_close()
        self._server = None
