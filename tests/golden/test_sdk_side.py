"""The SDK held to the golden exchanges: each recorded request, played to the real
`PushApp` with the engine's recorded answers to its step calls, makes the same step calls
and gives the same answer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from ezgh_workflows._internal import clock, payload_cache, signing
from ezgh_workflows._internal.protocol import ApiInfo, RecordedStep, parse_history_page

from tests.golden import exchanges
from tests.golden.canon import UUID, Canon
from tests.golden.workflows import make_app

KEY = "golden-signing-key"


class ScriptedTransport:
    """Answers each step call with the recorded results, once its ops are the recorded ops."""

    def __init__(self, calls: list[dict[str, Any]], canon: Canon) -> None:
        self.calls = list(calls)
        self.canon = canon
        self.problems: list[str] = []

    def _next(self, made: Any) -> dict[str, Any]:
        if not self.calls:
            self.problems.append(f"an unrecorded call {made}")
            raise AssertionError("unrecorded call")
        return dict(self.calls.pop(0))

    async def send(self, ops: list[Any]) -> list[dict[str, Any]]:
        sent = self.canon.to_canonical(json.loads(json.dumps(ops)))
        call = self._next(sent)
        if sent != call.get("ops"):
            self.problems.append(f"step call {sent}\n recorded {call}")
        return self.canon.to_real(call["results"]) if "results" in call else []

    async def _read(self, what: str, body: dict[str, Any]) -> Any:
        made = {"read": what, "body": self.canon.to_canonical(body)}
        call = self._next(made)
        if made != {"read": call.get("read"), "body": call.get("body")}:
            self.problems.append(f"{made}\n recorded {call}")
        return self.canon.to_real(call.get("answer"))

    async def read_history(self, cursor: str) -> tuple[list[RecordedStep], str | None]:
        return parse_history_page(await self._read("history", {"cursor": cursor}))

    async def read_payload(self, ref: str) -> Any:
        return (await self._read("payload", {"ref": ref}))["value"]

    async def aclose(self) -> None:
        return None


def _seeded(document: Any) -> Canon:
    """A canon that knows every ID in `document` as itself (they are canonical already)."""
    canon = Canon()
    for found in UUID.findall(json.dumps(document)):
        canon.seed(found, found)
    return canon


async def _post(app: Any, body: dict[str, Any]) -> httpx.Response:
    raw = json.dumps(body).encode()
    timestamp = str(int(clock.unix_seconds()))
    invocation = f"{body['invocationId']}/1"
    headers = signing.signed_headers(KEY, timestamp, raw, path="/", invocation=invocation)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app.invalid") as client:
        return await client.post("/", content=raw, headers=headers)


def _cases() -> list[Any]:
    return [
        pytest.param(name, n, id=f"{name}-{n}")
        for name in exchanges.names()
        for n in range(len(exchanges.load(name)["invocations"]))
    ]


@pytest.mark.parametrize(("name", "n"), _cases())
def test_the_sdk_makes_the_recorded_calls_and_answer(name: str, n: int) -> None:
    invocation = exchanges.load(name)["invocations"][n]
    recorded = invocation["request"]
    request = {**recorded, "invocationId": f"inv-{n}", "api": {**recorded["api"], "token": "t"}}
    canon = _seeded(request)
    scripted = ScriptedTransport(invocation["calls"], canon)

    def factory(api: ApiInfo, deployment_id: str | None) -> ScriptedTransport:
        return scripted

    app = make_app(signing_key=KEY, transport_factory=factory)
    payload_cache.CACHE = payload_cache.PayloadCache()  # each recorded request met a cold SDK
    answer = asyncio.run(_post(app, request))
    assert answer.status_code == 200, answer.text
    assert scripted.problems == []
    assert scripted.calls == [], "recorded step calls the SDK did not make"
    assert canon.to_canonical(answer.json()) == invocation["answer"]
