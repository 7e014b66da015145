"""Step calls from the SDK to the engine (protocol section 2), behind a small interface, and
(1.5) the reads of what an invoke request gave as references: history pages and values."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx

from . import clock
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


# How long one step call keeps trying while the engine is busy or throttled (429, 503):
# inside the steps function's own 29 s and the engine's default 300 s wait for an
# invocation's answer. An invocation the engine stopped waiting for is refused (409) and stops.
RETRY_FOR_SECONDS = 30.0
# The longest wait between two tries, and the longest `Retry-After` honoured as asked.
MAX_RETRY_WAIT_SECONDS = 5.0
MAX_RETRY_AFTER_SECONDS = 20.0
# Past the schedule, a busy engine's waits double from at least this.
MIN_BUSY_WAIT_SECONDS = 0.1
# The engine busy (503 `unavailable`, 429 `rate_limited`) or the steps function's URL
# throttled by Lambda (429 "Rate Exceeded"): tried for up to `retry_for_seconds`. Another
# 5xx or a network error: tried as often as the backoff schedule has steps.
BUSY_STATUSES = frozenset({429, 503})


class EngineBusy(TransportError):
    """A call the engine kept answering busy or throttled (429, 503) past its retries: not
    the app's fault. The invocation answers `throttled` (docs/protocol.md section 1.2), which
    the engine delivers again later without counting a failed delivery."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds, the last answer's `Retry-After`


class HttpStepTransport:
    """`StepTransport` over HTTP: ``POST {api.url}/v1/invocations/steps``.

    A failed call is sent again with the same ops (every op is idempotent) after the
    `backoff` schedule's jittered waits, at least the answer's `Retry-After`: a throttled or
    busy one (429, 503) for up to `retry_for_seconds`, its waits doubling past the schedule
    (at most `MAX_RETRY_WAIT_SECONDS`), then `EngineBusy`; another 5xx or a network error
    once per step of the schedule, then `TransportError`. Never past `deadline` (a
    `clock.monotonic()` time), when given. It is a
    `StateReader` too: the history and payload calls go to the same engine URL, with the same
    token and retries (they only read).
    """

    def __init__(
        self,
        api: ApiInfo,
        deployment_id: str | None,
        *,
        backoff: Sequence[float] = (0.1, 0.4, 1.2),
        retry_for_seconds: float = RETRY_FOR_SECONDS,
        deadline: float | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._base = api.url.rstrip("/")
        self._url = self._base + STEPS_PATH
        self._headers = {"Authorization": f"Bearer {api.token}"}
        self._deployment_id = deployment_id
        self._backoff = tuple(backoff) or (0.0,)
        self._retry_for = retry_for_seconds
        self._deadline = deadline
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
        """The 200 answer to ``body`` at ``url``, retried as the class says."""
        began = clock.monotonic()
        for tried in itertools.count():
            problem = await self._attempt(url, body, what)
            if isinstance(problem, httpx.Response):
                return problem
            reason, busy, retry_after = problem
            delay = self._wait(tried, busy, retry_after)
            if delay is None or not self._in_time(began, delay):
                if busy:
                    raise EngineBusy(f"{what} stayed throttled: {reason}", retry_after)
                raise TransportError(f"{what} failed: {reason}")
            logger.warning("%s failed (%s); retrying in %.1fs", what, reason, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    def _wait(self, tried: int, busy: bool, retry_after: float | None) -> float | None:
        """The wait before try `tried` + 1: the schedule's step (for a busy engine, doubling
        past its end) with equal jitter, or the answer's `Retry-After` if longer; None when
        there is no next try (past the schedule and not busy, or a `Retry-After` beyond what
        the SDK waits)."""
        if retry_after is not None and retry_after > MAX_RETRY_AFTER_SECONDS:
            return None
        steps = self._backoff
        if tried < len(steps):
            base = steps[tried]
        elif busy:
            past = min(tried - len(steps) + 1, 8)
            base = max(steps[-1], MIN_BUSY_WAIT_SECONDS) * 2**past
        else:
            return None
        base = min(base, MAX_RETRY_WAIT_SECONDS)
        jittered = base * (0.5 + 0.5 * clock.random_fraction())
        return max(jittered, retry_after or 0.0)

    def _in_time(self, began: float, delay: float) -> bool:
        now = clock.monotonic()
        if self._deadline is not None and now + delay >= self._deadline:
            return False
        return now + delay - began < self._retry_for

    async def _attempt(
        self, url: str, body: dict[str, Any], what: str
    ) -> httpx.Response | tuple[str, bool, float | None]:
        """The answer, or a retryable failure: its description, whether the engine was
        busy (429, 503), and the answer's `Retry-After` (seconds)."""
        try:
            answer = await self._client.post(url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}", False, None
        if answer.status_code in BUSY_STATUSES or answer.status_code >= 500:
            busy = answer.status_code in BUSY_STATUSES
            return f"HTTP {answer.status_code}", busy, _retry_after(answer)
        if answer.status_code in (401, 409):
            raise AbortInvocation(_reason(answer))
        if answer.status_code != 200:
            raise TransportError(f"{what} refused: {_reason(answer)}")
        return answer

    async def aclose(self) -> None:
        await self._client.aclose()


def _retry_after(answer: httpx.Response) -> float | None:
    """`Retry-After` in seconds (a number of seconds; a date is not used), or None."""
    value = answer.headers.get("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


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
