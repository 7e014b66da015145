"""A PushApp served by uvicorn, as the docs serve it, answers signed requests and refuses
unsigned ones."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from ezgh_engine.protocol import PROTOCOL_VERSION
from ezgh_workflows import Context, PushApp, workflow
from ezgh_workflows._internal.signing import signed_headers

uvicorn = pytest.importorskip("uvicorn")


@workflow("hello")
async def hello(ctx: Context) -> str:
    return "hi"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_push_app_under_uvicorn() -> None:
    app = PushApp([hello], signing_key="k-123")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        body = json.dumps({"protocol": PROTOCOL_VERSION, "type": "sync"}).encode()
        ts = str(int(time.time()))
        headers = {"content-type": "application/json", **signed_headers("k-123", ts, body)}
        answer = httpx.post(f"http://127.0.0.1:{port}/", content=body, headers=headers)
        assert answer.status_code == 200
        assert [w["name"] for w in answer.json()["workflows"]] == ["hello"]
        refused = httpx.post(f"http://127.0.0.1:{port}/", content=body)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
    finally:
        server.should_exit = True
        thread.join(10)
