"""API clients and the HTTP step transport, against httpx mock transports."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from ezgh_workflows import ApiError, QueuesClient, Worker, WorkflowsClient
from ezgh_workflows._internal.errors import AbortInvocation, TransportError
from ezgh_workflows._internal.protocol import ApiInfo
from ezgh_workflows._internal.transport import EngineBusy, HttpStepTransport

PREFIX = "/v1/organizations/org-1/projects/proj-1"


class Recorder:
    def __init__(self, answers: list[httpx.Response] | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.answers = answers or []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.answers:
            return self.answers.pop(0)
        return httpx.Response(200, json={"ok": True, "status": "completed"})


def _client(cls: Any, recorder: Recorder) -> Any:
    return cls(
        api_key="key-1",
        organization_id="org-1",
        project_id="proj-1",
        base_url="http://api.test/",
        http_client=httpx.Client(transport=httpx.MockTransport(recorder)),
    )


def test_workflows_client_paths() -> None:
    rec = Recorder()
    client = _client(WorkflowsClient, rec)
    client.start_run("app", "onboarding", {"a": 1}, run_key="k-1")
    client.get_run("r/1")
    client.search_runs(app_id="app", status="failed", limit=5, cursor=None)
    client.cancel_run("r1")
    client.retry_run("r1")
    client.list_run_events("r1", limit=2)
    client.get_payload("r1", "steps/a#1/output")
    client.delete_run("r1")
    client.create_app("billing", "push", url="https://x")
    client.get_app("wfa_1")
    client.list_apps()
    client.update_app("wfa_1", url="https://y", notifications=None)
    client.sync_app("wfa_1")
    client.delete_app("wfa_1")
    seen = [(r.method, r.url.raw_path.decode()) for r in rec.requests]
    assert seen == [
        ("POST", f"{PREFIX}/runs"),
        ("GET", f"{PREFIX}/runs/r%2F1"),
        ("GET", f"{PREFIX}/runs?appId=app&status=failed&limit=5"),
        ("POST", f"{PREFIX}/runs/r1/cancel"),
        ("POST", f"{PREFIX}/runs/r1/retry"),
        ("GET", f"{PREFIX}/runs/r1/events?limit=2"),
        ("GET", f"{PREFIX}/runs/r1/payloads/steps/a%231/output"),
        ("DELETE", f"{PREFIX}/runs/r1"),
        ("POST", f"{PREFIX}/apps"),
        ("GET", f"{PREFIX}/apps/wfa_1"),
        ("GET", f"{PREFIX}/apps"),
        ("PATCH", f"{PREFIX}/apps/wfa_1"),
        ("POST", f"{PREFIX}/apps/wfa_1/sync"),
        ("DELETE", f"{PREFIX}/apps/wfa_1"),
    ]
    assert json.loads(rec.requests[0].content) == {
        "appId": "app",
        "workflow": "onboarding",
        "input": {"a": 1},
        "runKey": "k-1",
    }
    assert json.loads(rec.requests[11].content) == {"url": "https://y", "notifications": None}
    assert all(r.headers["authorization"] == "Bearer key-1" for r in rec.requests)


def test_api_errors() -> None:
    rec = Recorder(
        [
            httpx.Response(409, json={"error": {"code": "run_key_conflict", "message": "taken"}}),
            httpx.Response(502, text="bad gateway"),
        ]
    )
    client = _client(WorkflowsClient, rec)
    with pytest.raises(ApiError) as caught:
        client.start_run("app", "wf")
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        409,
        "run_key_conflict",
        "taken",
    )
    with pytest.raises(ApiError) as caught:
        client.get_run("x")
    assert caught.value.status == 502 and caught.value.code == "http_error"


def test_wait_for_run_polls_until_ended() -> None:
    rec = Recorder(
        [
            httpx.Response(200, json={"status": "running"}),
            httpx.Response(200, json={"status": "completed", "output": 1}),
        ]
    )
    run = _client(WorkflowsClient, rec).wait_for_run("r1", timeout=5, interval=0)
    assert run["output"] == 1 and len(rec.requests) == 2


def test_wait_for_run_times_out() -> None:
    rec = Recorder([httpx.Response(200, json={"status": "running"})] * 3)
    with pytest.raises(TimeoutError):
        _client(WorkflowsClient, rec).wait_for_run("r1", timeout=0, interval=0)


def test_settings_fall_back_to_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EZGH_API_KEY", "env-key")
    monkeypatch.setenv("EZGH_ORG_ID", "o")
    monkeypatch.setenv("EZGH_PROJECT_ID", "p")
    monkeypatch.setenv("EZGH_API_URL", "http://env.test")
    client = QueuesClient()
    assert (client.api_key, client.organization_id, client.project_id, client.base_url) == (
        "env-key",
        "o",
        "p",
        "http://env.test",
    )
    monkeypatch.delenv("EZGH_API_KEY")
    with pytest.raises(ValueError, match="EZGH_API_KEY"):
        WorkflowsClient()


def test_queues_send() -> None:
    rec = Recorder([httpx.Response(200, json={"messages": [{"messageId": "m1"}]})])
    client = _client(QueuesClient, rec)
    answer = client.send("q-1", [{"body": "hi", "attributes": {"a": "b"}}], idempotency_key="i1")
    assert answer == {"messages": [{"messageId": "m1"}]}
    request = rec.requests[0]
    assert request.url.raw_path.decode() == f"{PREFIX}/queues/q-1/messages"
    assert json.loads(request.content) == {"messages": [{"body": "hi", "attributes": {"a": "b"}}]}
    assert request.headers["idempotency-key"] == "i1"
    with pytest.raises(ValueError):
        client.send("q-1", [])


def test_worker_needs_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("EZGH_API_KEY", "EZGH_API_URL", "EZGH_ORG_ID", "EZGH_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="API key"):
        Worker("app", [])
    worker = Worker(
        "app",
        [],
        api_key="k",
        organization_id="o",
        project_id="p",
        base_url="http://engine.test",
        worker_id="w1",
        concurrency=2,
    )
    assert worker.worker_id == "w1" and worker.concurrency == 2 and worker.workflows == []
    with pytest.raises(ValueError):
        Worker(
            "app",
            [],
            api_key="k",
            organization_id="o",
            project_id="p",
            base_url="http://engine.test",
            concurrency=0,
        )


def _transport(rec: Recorder, retry_for_seconds: float = 0.5) -> HttpStepTransport:
    client = httpx.AsyncClient(transport=httpx.MockTransport(rec))
    return HttpStepTransport(
        ApiInfo("http://engine.test/", "tok"),
        "dep",
        backoff=(0, 0),
        retry_for_seconds=retry_for_seconds,
        client=client,
    )


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The step transport's waits, taken on a fake monotonic clock instead of slept."""
    from ezgh_workflows._internal import clock
    from ezgh_workflows._internal import transport as module

    slept: list[float] = []
    now = [1000.0]

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(module.asyncio, "sleep", sleep)
    monkeypatch.setattr(clock, "monotonic", lambda: now[0])
    return slept


def test_step_transport_retries_server_errors() -> None:
    ok = httpx.Response(200, json={"results": [{"stepId": "a#1", "result": "ok"}]})
    rec = Recorder([httpx.Response(503), httpx.Response(500), ok])
    ops = [{"op": "record", "stepId": "a#1", "name": "a", "kind": "value", "output": 1}]
    results = asyncio.run(_transport(rec).send(ops))
    assert results == [{"stepId": "a#1", "result": "ok"}]
    assert len(rec.requests) == 3
    request = rec.requests[0]
    assert request.url == "http://engine.test/v1/invocations/steps"
    assert request.headers["authorization"] == "Bearer tok"
    assert json.loads(request.content) == {"deploymentId": "dep", "ops": ops, "protocol": "1.5"}


def test_step_transport_gives_up_and_aborts(waits: list[float]) -> None:
    rec = Recorder([httpx.Response(503)] * 1000)
    with pytest.raises(TransportError):
        asyncio.run(_transport(rec, retry_for_seconds=0).send([]))
    assert len(rec.requests) == 1
    conflict = httpx.Response(409, json={"error": {"code": "invalid_state", "message": "lease"}})
    with pytest.raises(AbortInvocation, match="invalid_state"):
        asyncio.run(_transport(Recorder([conflict])).send([]))
    with pytest.raises(TransportError):
        asyncio.run(_transport(Recorder([httpx.Response(400, json={})])).send([]))


OK = httpx.Response(200, json={"results": [{"stepId": "a#1", "result": "ok"}]})
RECORD = [{"op": "record", "stepId": "a#1", "name": "a", "kind": "value", "output": 1}]


def test_a_throttled_step_call_waits_its_retry_after_and_goes_through(waits: list[float]) -> None:
    """A 429 (the engine's `rate_limited`, or Lambda throttling the steps function's URL) is
    sent again after at least its `Retry-After`, like a 503 `unavailable`."""
    throttled = httpx.Response(
        429, headers={"Retry-After": "2"}, json={"error": {"code": "rate_limited"}}
    )
    busy = httpx.Response(503, headers={"Retry-After": "1"})
    rec = Recorder([throttled, busy, httpx.Response(429), OK])
    results = asyncio.run(_transport(rec, retry_for_seconds=30).send(RECORD))
    assert results == [{"stepId": "a#1", "result": "ok"}]
    assert len(rec.requests) == 4
    assert waits[0] >= 2 and waits[1] >= 1
    assert len(waits) == 3


def test_a_step_call_throttled_for_long_keeps_trying_for_its_time_then_fails(
    waits: list[float],
) -> None:
    """Retries go on past the first few, the waits growing (jittered, at most 5 s) until
    `retry_for_seconds` would be passed; then the call fails."""
    rec = Recorder([httpx.Response(429)] * 99)
    client = httpx.AsyncClient(transport=httpx.MockTransport(rec))
    transport = HttpStepTransport(ApiInfo("http://e.test/", "t"), "dep", client=client)
    with pytest.raises(EngineBusy, match="HTTP 429"):  # the invocation answers `throttled`
        asyncio.run(transport.send(RECORD))  # the defaults: 0.1, 0.4, 1.2 s, then doubling
    assert 15 < sum(waits) < 30
    assert len(rec.requests) == len(waits) + 1 > 6
    assert max(waits) <= 5


def test_a_network_error_or_another_5xx_is_tried_once_per_step_of_the_schedule(
    waits: list[float],
) -> None:
    """Only a busy engine (429, 503) gets the longer patience; a 500, a 502 or a dropped
    connection is tried again as often as the schedule has steps (three by default)."""
    for failing in ([httpx.Response(500)] * 9, [httpx.Response(502)] * 9):
        rec = Recorder(failing)
        client = httpx.AsyncClient(transport=httpx.MockTransport(rec))
        transport = HttpStepTransport(ApiInfo("http://e.test/", "t"), "dep", client=client)
        waits.clear()
        with pytest.raises(TransportError) as raised:
            asyncio.run(transport.send(RECORD))
        assert not isinstance(raised.value, EngineBusy)  # the app's own failure: counted
        assert len(rec.requests) == 4 and len(waits) == 3


def test_a_retry_after_beyond_what_the_sdk_waits_fails_at_once(waits: list[float]) -> None:
    rec = Recorder([httpx.Response(429, headers={"Retry-After": "3600"}), OK])
    with pytest.raises(TransportError):
        asyncio.run(_transport(rec, retry_for_seconds=30).send(RECORD))
    assert waits == []


def test_a_step_call_never_waits_past_its_deadline(waits: list[float]) -> None:
    from ezgh_workflows._internal import clock

    client = httpx.AsyncClient(transport=httpx.MockTransport(Recorder([httpx.Response(503)] * 99)))
    transport = HttpStepTransport(
        ApiInfo("http://e.test/", "t"), "dep", deadline=clock.monotonic() + 3, client=client
    )
    with pytest.raises(TransportError):
        asyncio.run(transport.send(RECORD))
    assert sum(waits) < 3


def test_a_step_call_over_a_real_connection_attempts_no_failing_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpcore imports sniffio at each lock it sets up and falls back when that fails;
    Python caches no failed import, so without sniffio installed every step call searched
    sys.path again (sdk/pyproject.toml). Seen failing with sniffio uninstalled."""
    import builtins

    failed: list[str] = []
    real_import = builtins.__import__

    def recording_import(name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return real_import(name, *args, **kwargs)
        except ImportError:
            failed.append(name)
            raise

    ops = [{"op": "record", "stepId": "a#1", "name": "a", "kind": "value", "output": 1}]
    answer = json.dumps({"results": [{"stepId": "a#1", "result": "ok"}]}).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(answer)}\r\n\r\n".encode()
            + answer
        )
        await writer.drain()
        writer.close()

    async def call_twice() -> list[Any]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = HttpStepTransport(ApiInfo(f"http://127.0.0.1:{port}/", "tok"), "dep")
        async with server:
            await transport.send(ops)  # the first call may import what it lazily needs
            monkeypatch.setattr(builtins, "__import__", recording_import)
            return await transport.send(ops)

    assert asyncio.run(call_twice()) == [{"stepId": "a#1", "result": "ok"}]
    assert failed == []


def test_get_run_and_list_apps_read_every_page() -> None:
    """A run whose steps do not fit one answer comes with `nextStepsCursor`, a list with
    `nextCursor`: the client reads on and answers them whole."""
    rec = Recorder(
        [
            httpx.Response(
                200, json={"id": "r1", "steps": [{"id": "a#1"}], "nextStepsCursor": "c1"}
            ),
            httpx.Response(
                200, json={"id": "r1", "steps": [{"id": "b#1"}], "nextStepsCursor": None}
            ),
            httpx.Response(200, json={"apps": [{"name": "a"}], "nextCursor": "k1"}),
            httpx.Response(200, json={"apps": [{"name": "b"}], "nextCursor": None}),
        ]
    )
    client = _client(WorkflowsClient, rec)
    assert client.get_run("r1") == {"id": "r1", "steps": [{"id": "a#1"}, {"id": "b#1"}]}
    assert client.list_apps() == {"apps": [{"name": "a"}, {"name": "b"}]}
    assert [r.url.params.get("stepsCursor") for r in rec.requests[:2]] == [None, "c1"]
    assert [r.url.params.get("cursor") for r in rec.requests[2:]] == [None, "k1"]
