"""Invoke requests of bounded size, however large the run's history (protocol 1.5).

A push app on Lambda sits behind a function URL, which refuses a request whose event passes
6 MB (413) before the app's code runs. Up to 1.4 every invoke request carried every
recorded value inline, the ones kept in S3 read back: eight steps of 1 MiB made an 8 MB
request, refused on every try, and the run failed `workflows.app_unreachable`. From 1.5 a
value kept in S3 travels as a reference the SDK reads, and a history too long for one
request arrives in pages (docs/protocol.md, section 1.3). The app here is served exactly as
a function URL serves it: the request becomes the Lambda event, refused past 6 MB.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest
from ezgh_engine.adapters import registry_store
from ezgh_engine.core.sizes import LAMBDA_PAYLOAD_BYTES
from ezgh_engine.protocol import bounds
from ezgh_workflows import Context, PushApp, workflow
from sdk_engine import Engine, make_app, run_to_end

MIB = 1024 * 1024
CHUNK = MIB - 2  # a string of 1 MiB encoded: the largest step result the docs allow


class FunctionUrl:
    """An ASGI server that serves a `PushApp` as a Lambda function URL does: the HTTP request
    becomes the function's event (payload format 2.0, the body as one JSON string, as Lambda
    writes it), refused with 413 when that event passes Lambda's 6 MB; the handler's answer
    is the HTTP answer, a 502 when it passes 6 MB."""

    def __init__(self, app: PushApp) -> None:
        self.app = app
        self.largest = 0  # the largest event it took
        self.refused = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        headers = {k.decode(): v.decode() for k, v in scope.get("headers", [])}
        event = {
            "version": "2.0",
            "rawPath": scope.get("path", "/"),
            "rawQueryString": "",
            "headers": headers,
            "requestContext": {"http": {"method": scope["method"], "path": scope["path"]}},
            "body": body.decode(),
            "isBase64Encoded": False,
        }
        size = len(json.dumps(event, ensure_ascii=False).encode())
        if size > LAMBDA_PAYLOAD_BYTES:
            self.refused += 1
            message = f"Request must be smaller than {LAMBDA_PAYLOAD_BYTES} bytes"
            await _answer(send, 413, json.dumps({"Message": message}).encode())
            return
        self.largest = max(self.largest, size)
        result = await asyncio.to_thread(self.app.lambda_handler, event, None)
        if len(json.dumps(result, ensure_ascii=False).encode()) > LAMBDA_PAYLOAD_BYTES:
            await _answer(send, 502, b'{"Message":"response too large"}')
            return
        await _answer(send, int(result["statusCode"]), str(result["body"]).encode())


async def _answer(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _serve(engine: Engine, *workflows: Any) -> FunctionUrl:
    app = make_app(engine, *workflows)
    served = FunctionUrl(app)
    engine.app_asgi = served
    return served


@workflow("eight-mib")
async def eight_mib(ctx: Context) -> Any:
    """Eight steps of 1 MiB, each followed by a sleep: every invocation after the first
    replays the values recorded before it (the last one all eight)."""
    values = []
    for i in range(8):
        values.append(await ctx.step.run(f"chunk-{i}", lambda i=i: chr(97 + i) * CHUNK))
        await ctx.step.sleep(f"pause-{i}", 1)
    return [[value[0], len(value)] for value in values]


EXPECTED = [[chr(97 + i), CHUNK] for i in range(8)]


def test_eight_outputs_of_a_mib_complete_behind_a_function_url(engine: Engine) -> None:
    served = _serve(engine, eight_mib)
    _, invocations = run_to_end(served.app, engine, "eight-mib", limit=40)
    assert engine.status == "completed", engine.log()
    assert engine.run().output == EXPECTED
    assert invocations == 9 and served.refused == 0
    # Every request stayed within the bound, and the values came as references the SDK read.
    sizes = [len(json.dumps(d.request).encode()) for d in engine.deliveries]
    assert max(sizes) <= bounds.PUSH_REQUEST_BYTES, sizes
    last = engine.deliveries[-1].request
    assert last["protocol"] == "1.5"
    refs = [s["outputRef"] for s in last["steps"] if s["kind"] == "run"]
    assert len(refs) == 8 and all("output" not in s for s in last["steps"] if s["kind"] == "run")
    read = [body["ref"] for what, body in engine.reads if what == "payload"]
    assert set(read) == set(refs)


def test_an_app_on_protocol_1_4_fails_the_run_clearly(engine: Engine) -> None:
    """An app that said 1.4 gets the 1.4 request, every value inline, as before; once that
    passes what its function URL takes, the run fails at once with an error that says why,
    not `app_unreachable` after eight refused tries."""
    served = _serve(engine, eight_mib)
    run_id = engine.start("eight-mib")
    app = registry_store.get_app(engine.project_id, engine.plant.app_id)
    assert app is not None and app.protocol == "1.5"
    registry_store.save_app(replace(app, protocol="1.4"))
    try:
        engine.pump(lambda: engine.ended(run_id), limit=400)
    finally:
        registry_store.save_app(replace(app, version=app.version + 1, protocol="1.5"))
    run = engine.run(run_id)
    assert run.status == "failed" and run.error is not None
    assert run.error.code == "workflows.request_too_large"
    assert "1.5" in run.error.message
    assert served.refused == 1  # refused once: the same request would be refused again
    invokes = [d.request for d in engine.deliveries if d.request.get("type") == "invoke"]
    assert invokes and all(request["protocol"] == "1.4" for request in invokes)


@workflow("long-history")
async def long_history(ctx: Context) -> Any:
    """Sixty steps of 60 KB (kept in their items): 3.6 MB of history, more than one request
    holds, replayed after the sleep from the history's pages."""
    values = [await ctx.step.run("part", lambda i=i: f"{i:03d}" * 20_000) for i in range(60)]
    await ctx.step.sleep("pause", 1)
    return [value[:3] for value in values]


def test_a_long_history_arrives_in_pages(engine: Engine) -> None:
    served = _serve(engine, long_history)
    run_to_end(served.app, engine, "long-history", limit=20)
    assert engine.status == "completed", engine.log()
    assert engine.run().output == [f"{i:03d}" for i in range(60)]
    replay = engine.deliveries[-1].request
    assert len(json.dumps(replay)) <= bounds.PUSH_REQUEST_BYTES
    # Nothing is pending when the sleep has woken: the request lists no step, and its
    # cursor opens the ended ones, page by page.
    assert replay["steps"] == [] and _phase(replay) == "ended"
    pages = [body for what, body in engine.reads if what == "history"]
    assert len(pages) >= 3


def _phase(request: dict[str, Any]) -> str:
    from ezgh_engine.adapters import ddb
    from ezgh_engine.service import wire

    key = ddb.decode_cursor(request["stepsCursor"], scope=wire.history_scope(request["run"]["id"]))
    return str(key["phase"]["S"])


def test_when_not_even_the_waiting_steps_fit_the_first_page_holds_them(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request too small for the steps not ended (a pull task of a wide gather) lists none:
    the history's first page holds every step not ended, read at one moment, and the
    ended ones follow."""
    monkeypatch.setattr(bounds, "PUSH_REQUEST_BYTES", 600)
    served = _serve(engine, long_history)
    run_to_end(served.app, engine, "long-history", limit=20)
    assert engine.status == "completed", engine.log()
    assert engine.run().output == [f"{i:03d}" for i in range(60)]
    replay = engine.deliveries[-1].request
    assert replay["steps"] == [] and _phase(replay) == "pending"


def test_values_read_by_reference_are_read_once_per_process(engine: Engine) -> None:
    """A reference's value never changes: a warm process reads each one once for the run,
    not at every replay (eight results of 1 MiB: 8 reads over 9 invocations, not 36)."""
    from ezgh_workflows._internal import payload_cache

    payload_cache.CACHE = payload_cache.PayloadCache()
    served = _serve(engine, eight_mib)
    run_to_end(served.app, engine, "eight-mib", limit=40)
    assert engine.run().output == EXPECTED
    assert len([what for what, _ in engine.reads if what == "payload"]) == 8


def test_the_payload_cache_holds_at_most_its_bytes() -> None:
    from ezgh_workflows._internal.payload_cache import PayloadCache

    cache = PayloadCache(max_bytes=100)
    cache.put("r", "a", "x" * 40)
    cache.put("r", "b", "y" * 40)
    assert cache.get("r", "a") == (True, "x" * 40)  # now the most recently used
    cache.put("r", "c", "z" * 40)  # over 100 bytes: the least recently used goes
    assert cache.get("r", "b") == (False, None)
    assert cache.get("r", "a")[0] and cache.get("r", "c")[0]
    cache.put("r", "d", "w" * 200)  # larger than the whole cache: not kept
    assert cache.get("r", "d") == (False, None)


def test_a_recorded_result_by_reference_is_read_and_a_held_end_compared_with_it() -> None:
    """A step call's `recorded` result may give a large output as a reference (1.5): the SDK
    reads it before using it, and compares a held end with the value, not the reference."""
    from ezgh_workflows._internal import payload_cache
    from ezgh_workflows._internal.step_calls import StepCalls

    payload_cache.CACHE = payload_cache.PayloadCache()
    step = {"id": "a#1", "name": "a", "kind": "run", "status": "completed", "attempt": 1}
    recorded = {"stepId": "a#1", "result": "recorded", "step": {**step, "outputRef": "steps/r"}}

    class Transport:
        reads: list[str] = []

        async def send(self, ops: list[Any]) -> list[Any]:
            return [recorded for _ in ops]

        async def read_payload(self, ref: str) -> Any:
            self.reads.append(ref)
            return "big"

        async def read_history(self, cursor: str) -> Any:
            raise AssertionError("no history here")

        async def aclose(self) -> None:
            return None

    transport = Transport()
    calls = StepCalls(transport, hold=True, run_id="r1")

    async def scenario() -> Any:
        got = await calls.recorded(recorded)
        calls.round_of(1)
        await calls.end({"op": "complete", "stepId": "a#1", "output": "big"})
        await calls.send([])  # the held end answered `recorded` with the same value: no abort
        return got

    got = asyncio.run(scenario())
    assert got.output == "big" and got.output_ref is None
    assert transport.reads == ["steps/r"]  # read once: the held end's check used the cache
