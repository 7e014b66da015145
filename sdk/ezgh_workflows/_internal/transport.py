"""Step calls from the SDK to the engine (protocol section 2), behind a small interface, and
(1.5) the reads of what an invoke request gave as references: history pages and values."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx

from .errors import AbortInvocation, TransportError
from .protocol import (
    PROTOCOL_VERSION,
    ApiInfo,
    Op,
    ProtocolError,
    RecordedStep,
    parse_history_page,
)

logger = logging.getLogger("ezgh_workflows")

STEPS_PATH = "/v1/invocations/steps"
HISTORY_PATH = "/v1/invocations/history"
PAYLOAD_PATH = "/v1/invocations/payload"


class StepTransport(Protocol):
    """Sends ops for one invocation and answers one result per op, in order.

    Raises `AbortInvocation` when the engine refuses the call as stale (409) or the
    invocation's token is no longer valid (401), and `TransportError` when it cannot deliver.
    """

    async def send(self, ops: list[Op]) -> list[dict[str, Any]]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class StateReader(Protocol):
    """Reads what an invoke request gave as references (protocol 1.5), with the same token
    and the same errors as `StepTransport.send`."""

    async def read_history(self, cursor: str) -> tuple[list[RecordedStep], str | None]:
        """A page of the run's history: its steps, and the cursor of the next page."""
        ...

    async def read_payload(self, ref: str) -> Any:
        """The JSON value at the payload path ``ref`` of the run."""
        ...


TransportFactory = Callable[[ApiInfo, str | None], StepTransport]


class HttpStepTransport:
    """`StepTransport` over HTTP: ``POST {api.url}/v1/invocations/steps``.

    5xx answers and network errors are retried with the same ops (every op is idempotent).
    It is a `StateReader` too: the history and payload calls go to the same engine URL, with
    the same token and retries (they only read).
    """

    def __init__(
        self,
        api: ApiInfo,
        deployment_id: str | None,
        *,
        backoff: Sequence[float] = (0.1, 0.4, 1.2),
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._base = api.url.rstrip("/")
        self._url = self._base + STEPS_PATH
        self._headers = {"Authorization": f"Bearer {api.token}"}
        self._deployment_id = deployment_id
        self._backoff = tuple(backoff)
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(30.0),
            verify=_tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")),
        )

    async def send(self, ops: list[Op]) -> list[dict[str, Any]]:
        # `protocol`: a `recorded` result may then give a large output as a reference (1.5).
        body = {"deploymentId": self._deployment_id, "ops": ops, "protocol": PROTOCOL_VERSION}
        answer = await self._call(self._url, body, "step call")
        return _results(answer, len(ops))

    async def read_history(self, cursor: str) -> tuple[list[RecordedStep], str | None]:
        answer = await self._call(self._base + HISTORY_PATH, {"cursor": cursor}, "history read")
        try:
            return parse_history_page(_json(answer, "history read"))
        except ProtocolError as exc:
            raise TransportError(f"history read answered no page: {exc}") from exc

    async def read_payload(self, ref: str) -> Any:
        answer = await self._call(self._base + PAYLOAD_PATH, {"ref": ref}, "payload read")
        body = _json(answer, "payload read")
        if not isinstance(body, dict) or "value" not in body:
            raise TransportError("payload read answered no value")
        return body["value"]

    async def _call(self, url: str, body: dict[str, Any], what: str) -> httpx.Response:
        """The 200 answer to ``body`` at ``url``, retried on 5xx and network errors."""
        for delay in (*self._backoff, None):
            problem = await self._attempt(url, body, what)
            if isinstance(problem, httpx.Response):
                return problem
            if delay is None:
                raise TransportError(f"{what} failed: {problem}")
            logger.warning("%s failed (%s); retrying in %.1fs", what, problem, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _attempt(self, url: str, body: dict[str, Any], what: str) -> httpx.Response | str:
        """The answer, or a description of a retryable failure."""
        try:
            answer = await self._client.post(url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if answer.status_code >= 500:
            return f"HTTP {answer.status_code}"
        if answer.status_code in (401, 409):
            raise AbortInvocation(_reason(answer))
        if answer.status_code != 200:
            raise TransportError(f"{what} refused: {_reason(answer)}")
        return answer

    async def aclose(self) -> None:
        await self._client.aclose()


@functools.lru_cache(maxsize=4)
def _tls_context(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    """httpx's default TLS context (same CAs, same settings), made once per CA setting
    (the arguments: the variables httpx reads). Making one loads the CA bundle, about
    25 ms of CPU, which every invocation's transport paid."""
    return httpx.create_ssl_context()


def _reason(answer: httpx.Response) -> str:
    try:
        error = answer.json().get("error") or {}
        return f"{answer.status_code} {error.get('code')}: {error.get('message')}"
    except (ValueError, AttributeError):
        return f"HTTP {answer.status_code}"


def _json(answer: httpx.Response, what: str) -> Any:
    try:
        return answer.json()
    except ValueError as exc:
        raise TransportError(f"{what} answer is not JSON") from exc


def _results(answer: httpx.Response, count: int) -> list[dict[str, Any]]:
    try:
        results = answer.json().get("results")
    except (ValueError, AttributeError) as exc:
        raise TransportError("step call answer is not JSON with 'results'") from exc
    if not isinstance(results, list) or len(results) != count:
        raise TransportError(f"step call answer has no list of {count} results")
    return results


def http_transport_factory(api: ApiInfo, deployment_id: str | None) -> StepTransport:
    """The default `TransportFactory`."""
    return HttpStepTransport(api, deployment_id)
