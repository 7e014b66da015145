"""PushApp verifies protocol 1.4 signatures against the path it received, under ASGI too."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from ezgh_workflows import Context, PushApp, workflow
from ezgh_workflows._internal import signing

KEY = "k-paths"
SYNC = json.dumps({"protocol": "1.4", "type": "sync"}).encode()


@workflow("hello")
async def hello(ctx: Context) -> str:
    return "hi"


async def _post(path: str, headers: dict[str, str]) -> int:
    transport = httpx.ASGITransport(app=PushApp([hello], signing_key=KEY))
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        answer = await client.post(path, content=SYNC, headers=headers)
        return answer.status_code


def _headers(path: str) -> dict[str, str]:
    ts = str(int(time.time()))
    return {"content-type": "application/json", **signing.signed_headers(KEY, ts, SYNC, path=path)}


def test_a_request_signed_for_its_path_verifies() -> None:
    assert asyncio.run(_post("/hooks/ezgh", _headers("/hooks/ezgh"))) == 200
    assert asyncio.run(_post("/hooks/ezgh?x=1", _headers("/hooks/ezgh"))) == 200  # no query


def test_a_request_signed_for_another_path_is_401() -> None:
    assert asyncio.run(_post("/hooks/other", _headers("/hooks/ezgh"))) == 401
    assert asyncio.run(_post("/", _headers("/hooks/ezgh"))) == 401
