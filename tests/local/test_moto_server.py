"""moto's server reuses its connection threads: as many at once as connections at once."""

from __future__ import annotations

import threading
from typing import Any

import httpx
from ezgh_engine.local.moto_server import MotoServer


def _app(release: threading.Event, entered: threading.Event) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ["PATH_INFO"] == "/block":  # a long poll
            entered.set()
            release.wait()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode()]

    return app


def test_a_held_connection_gets_a_thread_of_its_own_and_idle_threads_are_reused() -> None:
    release, entered = threading.Event(), threading.Event()
    server = MotoServer("127.0.0.1", 0, _app(release, entered))
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        held: list[str] = []
        poll = threading.Thread(target=lambda: held.append(httpx.get(f"{url}/block").text))
        poll.start()
        entered.wait()
        pooled = server.server
        assert pooled is not None
        # While one worker holds the long poll, other requests are served (by another one),
        # each by the worker the one before gave back.
        for n in range(20):
            assert httpx.get(f"{url}/ping/{n}", timeout=30).text == f"/ping/{n}"
            assert pooled.wait_idle_workers(1, timeout=30)
        release.set()
        poll.join()
        assert held == ["/block"]
        workers = list(pooled.workers)
        assert len(workers) == 2  # 21 connections, at most 2 at once: 2 threads, not 21
    finally:
        release.set()
        server.stop()
    for worker in workers:  # closing the server ends its idle workers
        worker.join(timeout=30)
        assert not worker.is_alive()
