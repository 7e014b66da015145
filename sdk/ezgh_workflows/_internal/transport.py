"""Step calls from the SDK to the engine (protocol section 2), behind a small interface."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import httpx

from .errors import AbortInvocation, TransportError
from .protocol import ApiInfo, Op

logger = logging.getLogger("ezgh_workflows")

STEPS_PATH = "/v1/invocations/steps"


class StepTransport(Protocol):
    """Sends ops for one invocation and answers one result per op, in order.

    Raises `AbortInvocation` when the engine refuses the call as stale (409) or the
    invocation's token is no longer valid (401), and `TransportError` when it cannot deliver.
    """

    async def send(self, ops: list[Op]) -> list[dict[str, Any]]: ...

    async def aclose(self) -> None: ...


TransportFactory = Callable[[ApiInfo, str | None], StepTransport]


class HttpStepTransport:
    """`StepTransport` over HTTP: ``POST {api.url}/v1/invocations/steps``.

    5xx answers and network errors are retried with the same ops (every op is idempotent).
    """

    def __init__(
        self,
        api: ApiInfo,
        deployment_id: str | None,
        *,
        backoff: Sequence[float] = (0.1, 0.4, 1.2),
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._url = api.url.rstrip("/") + STEPS_PATH
        self._headers = {"Authorization": f"Bearer {api.token}"}
        self._deployment_id = deployment_id
        self._backoff = tuple(backoff)
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(30.0),
            verify=_tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")),
        )

    async def send(self, ops: list[Op]) -> list[dict[str, Any]]:
        body = {"deploymentId": self._deployment_id, "ops": ops}
        for delay in (*self._backoff, None):
            problem = await self._attempt(body, len(ops))
            if isinstance(problem, list):
                return problem
            if delay is None:
                raise TransportError(f"step call failed: {problem}")
            logger.warning("step call failed (%s); retrying in %.1fs", problem, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _attempt(self, body: dict[str, Any], count: int) -> list[dict[str, Any]] | str:
        """The results, or a description of a retryable failure."""
        try:
            answer = await self._client.post(self._url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if answer.status_code >= 500:
            return f"HTTP {answer.status_code}"
        if answer.status_code in (401, 409):
            raise AbortInvocation(_reason(answer))
        if answer.status_code != 200:
            raise TransportError(f"step call refused: {_reason(answer)}")
        return _results(answer, count)

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
