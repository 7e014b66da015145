"""The two push apps of the golden exchanges: one records what the real SDK says, one
replays a recording to the engine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
from ezgh_workflows._internal import payload_cache
from ezgh_workflows._internal.protocol import ApiInfo
from ezgh_workflows._internal.transport import (
    HISTORY_PATH,
    PAYLOAD_PATH,
    STEPS_PATH,
    HttpStepTransport,
    StepTransport,
)

from tests.golden.canon import Canon
from tests.golden.exchanges import Transcript
from tests.golden.workflows import make_app

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _invoke_body(raw: bytes) -> dict[str, Any] | None:
    try:
        payload = json.loads(raw)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) and payload.get("type") == "invoke" else None


READS = {HISTORY_PATH: "history", PAYLOAD_PATH: "payload"}
PATHS = {"history": HISTORY_PATH, "payload": PAYLOAD_PATH}


class RecordingApp:
    """The golden workflows' `PushApp`, with every invocation noted in `transcript`."""

    def __init__(self) -> None:
        self.transcript = Transcript()
        self.inner = make_app(transport_factory=self._transport)

    @property
    def signing_key(self) -> str | None:
        return self.inner.signing_key

    @signing_key.setter
    def signing_key(self, key: str | None) -> None:
        self.inner.signing_key = key

    def _transport(self, api: ApiInfo, deployment_id: str | None) -> StepTransport:
        """The SDK's own HTTP transport, each of its calls noted as it went on the wire."""
        transcript = self.transcript

        async def note(response: httpx.Response) -> None:
            await response.aread()
            body = json.loads(response.request.content)
            path = response.request.url.path
            if response.status_code != 200:
                return
            if path == STEPS_PATH:
                transcript.call(api.token, body["ops"], response.json()["results"])
            else:
                transcript.read(api.token, READS[path], body, response.json())

        client = httpx.AsyncClient(timeout=30, event_hooks={"response": [note]})
        return HttpStepTransport(api, deployment_id, client=client)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        raw = await _read_body(receive)
        body = _invoke_body(raw)
        transcript = self.transcript
        if body is not None:
            transcript.request(body)
            # Each invocation as a cold process meets it: what it reads by reference is
            # then one fixed sequence (a warm one keeps values read before: `payload_cache`).
            payload_cache.CACHE = payload_cache.PayloadCache()
        sent: list[bytes] = []

        async def replay() -> MutableMapping[str, Any]:
            return {"type": "http.request", "body": raw, "more_body": False}

        async def capture(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body":
                sent.append(message.get("body", b""))
            await send(message)

        await self.inner(scope, replay, capture)
        if body is not None:
            transcript.answer(body["api"]["token"], json.loads(b"".join(sent)))


class ReplayingApp:
    """Plays a recorded exchange to the engine: for each invoke request it finds the recorded
    invocation with the same (canonical) request, makes its step calls to the engine,
    checks each answer against the recording, and gives the recorded answer.

    Differences go to `problems` (the test asserts there are none). A step call answered
    otherwise still gets the recorded answer, so one difference does not hide the next; a
    request not in the recording fails the run."""

    signing_key: str | None = None

    def __init__(
        self,
        exchange: dict[str, Any],
        canon: Canon,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.canon = canon
        self.transport = transport  # to the engine's steps URL (None: the network)
        self.left = list(exchange["invocations"])
        self.problems: list[str] = []
        self._lock = asyncio.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                message = await receive()
                await send({"type": message["type"] + ".complete"})
            return
        raw = await _read_body(receive)
        body = _invoke_body(raw)
        answer = await self._invoke(body) if body is not None else self._sync(raw)
        data = json.dumps(answer).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": data})

    def _sync(self, raw: bytes) -> dict[str, Any]:
        from ezgh_workflows._internal.protocol import PROTOCOL_VERSION

        from tests.golden.workflows import WORKFLOWS

        return {
            "protocol": PROTOCOL_VERSION,  # the recordings' (made with the real SDK)
            "sdk": "golden-replay",
            "deploymentId": None,
            "workflows": [{"name": w.name} for w in WORKFLOWS],
        }

    async def _invoke(self, body: dict[str, Any]) -> Any:
        async with self._lock:  # one canonical numbering: documents in the order they happen
            request = self.canon.to_canonical(body)
            recorded = next((i for i in self.left if i["request"] == request), None)
            if recorded is None:
                expected = [i["request"] for i in self.left]
                self.problems.append(f"unexpected request {request}\n expected one of {expected}")
                # Fail the run: the test sees the difference at once, not a run invoked again
                # and again.
                error = {"code": "user", "name": "GoldenMismatch", "message": "not recorded"}
                return {"protocol": "1.5", "outcome": "failed", "error": error}
            self.left.remove(recorded)
            url = body["api"]["url"].rstrip("/") + STEPS_PATH
            headers = {"Authorization": f"Bearer {body['api']['token']}"}
            async with httpx.AsyncClient(timeout=30, transport=self.transport) as client:
                for call in recorded["calls"]:
                    if "read" in call:
                        await self._read(client, body["api"], call)
                        continue
                    ops = self.canon.to_real(call["ops"])
                    reply = await client.post(
                        url, json={"deploymentId": None, "ops": ops}, headers=headers
                    )
                    results = self.canon.to_canonical(reply.json().get("results"))
                    if reply.status_code != 200 or results != call["results"]:
                        self.problems.append(
                            f"step call {call['ops']}: answered {reply.status_code} {results}"
                            f"\n recorded {call['results']}"
                        )
            return self.canon.to_real(recorded["answer"])

    async def _read(self, client: httpx.AsyncClient, api: dict[str, Any], call: Any) -> None:
        """Make a recorded history or payload read; the engine must answer as recorded."""
        url = api["url"].rstrip("/") + PATHS[call["read"]]
        headers = {"Authorization": f"Bearer {api['token']}"}
        reply = await client.post(url, json=self.canon.to_real(call["body"]), headers=headers)
        answer = self.canon.to_canonical(reply.json())
        if reply.status_code != 200 or answer != call["answer"]:
            self.problems.append(
                f"{call['read']} read {call['body']}: answered {reply.status_code} {answer}"
                f"\n recorded {call['answer']}"
            )
