"""QueuesClient.send's retry rules and send_to_queue's step function (seed 004)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import pytest
from ezgh_workflows import ApiError, NonRetryableError, QueuesClient
from ezgh_workflows._internal import clients, queue_steps
from ezgh_workflows._internal.step_context import StepContext, enter_step, leave_step


def _client(answers: list[Any], seen: list[httpx.Request]) -> QueuesClient:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return QueuesClient(
        api_key="k",
        organization_id="o",
        project_id="p",
        base_url="http://q.test",
        http_client=httpx.Client(transport=httpx.MockTransport(handle)),
    )


def _error(status: int, code: str, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": "m"}}, headers=headers)


OK = httpx.Response(200, json={"messages": [{"messageId": "m1"}]})


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(clients.time, "sleep", slept.append)
    return slept


def test_resends_429_5xx_and_network_errors_after_retry_after(_no_sleep: list[float]) -> None:
    seen: list[httpx.Request] = []
    client = _client(
        [
            _error(429, "rate_limited", **{"Retry-After": "2"}),
            _error(503, "unavailable"),
            httpx.ConnectError("down"),
            OK,
        ],
        seen,
    )
    assert client.send("q1", [{"body": "x"}], idempotency_key="wfq_abc") == {
        "messages": [{"messageId": "m1"}]
    }
    assert len(seen) == 4
    assert all(r.headers["Idempotency-Key"] == "wfq_abc" for r in seen)
    assert _no_sleep[0] == 2.0 and len(_no_sleep) == 3
    assert json.loads(seen[0].content) == {"messages": [{"body": "x"}]}
    assert seen[0].url.path == "/v1/organizations/o/projects/p/queues/q1/messages"


def test_gives_up_after_three_resends() -> None:
    seen: list[httpx.Request] = []
    client = _client([_error(500, "internal_error")] * 4, seen)
    with pytest.raises(ApiError) as err:
        client.send("q1", [{"body": "x"}])
    assert err.value.status == 500 and len(seen) == 4


@pytest.mark.parametrize(
    ("status", "code"),
    [(429, "quota_exceeded"), (400, "validation_error"), (404, "not_found"), (403, "forbidden")],
)
def test_other_4xx_raise_at_once(status: int, code: str) -> None:
    seen: list[httpx.Request] = []
    client = _client([_error(status, code)], seen)
    with pytest.raises(ApiError):
        client.send("q1", [{"body": "x"}])
    assert len(seen) == 1


def test_send_step_uses_the_wfq_key_and_fifo_dedup_ids() -> None:
    digest = hashlib.sha256(b"run-1:notify").hexdigest()
    calls: list[tuple[str, list[dict[str, Any]], str | None]] = []

    class Fake:
        def send(
            self,
            queue_id: str,
            messages: list[dict[str, Any]],
            *,
            idempotency_key: str | None = None,
        ) -> Any:
            calls.append((queue_id, messages, idempotency_key))
            return {
                "messages": [{"messageId": f"m{i}", "seq": str(i)} for i in range(len(messages))]
            }

    messages = queue_steps.check_messages(
        [
            {"body": "a", "groupId": "g"},
            {"body": "b", "groupId": "g", "dedupId": "own"},
            {"body": "c"},
        ]
    )
    token = enter_step(StepContext("notify", 1, digest))
    try:
        result = queue_steps.send_fn(Fake(), "q1", messages)()
    finally:
        leave_step(token)
    assert result == [
        {"messageId": "m0", "seq": "0"},
        {"messageId": "m1", "seq": "1"},
        {"messageId": "m2", "seq": "2"},
    ]
    ((queue_id, sent, key),) = calls
    assert queue_id == "q1" and key == f"wfq_{digest}"
    assert [m.get("dedupId") for m in sent] == [f"{digest}:0", "own", None]


def test_send_step_4xx_is_not_retryable() -> None:
    class Fake:
        def send(self, *args: Any, **kwargs: Any) -> Any:
            raise ApiError(404, "not_found", "queue q1 not found")

    token = enter_step(StepContext("s", 1, "0" * 64))
    try:
        with pytest.raises(NonRetryableError):
            queue_steps.send_fn(Fake(), "q1", [{"body": "x"}])()
    finally:
        leave_step(token)


def test_send_to_queue_checks_the_message_count() -> None:
    with pytest.raises(ValueError):
        queue_steps.check_messages([])
    with pytest.raises(ValueError):
        queue_steps.check_messages([{"body": str(i)} for i in range(11)])


def test_send_step_retries_a_send_still_in_progress() -> None:
    """`409 idempotency_conflict` "still in progress" means an earlier attempt's send has
    not answered yet (or its answer is being stored): transient, so the step's retry policy
    resends the same key, instead of failing the run."""

    class Fake:
        def send(self, *args: Any, **kwargs: Any) -> Any:
            raise ApiError(
                409,
                "idempotency_conflict",
                "a request with this Idempotency-Key is still in progress; retry",
            )

    token = enter_step(StepContext("s", 1, "0" * 64))
    try:
        with pytest.raises(Exception) as raised:
            queue_steps.send_fn(Fake(), "q1", [{"body": "x"}])()
    finally:
        leave_step(token)
    assert not isinstance(raised.value, NonRetryableError)
