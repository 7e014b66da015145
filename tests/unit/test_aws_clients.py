"""`adapters.aws.client`: one client per service however many threads ask at once, all made
from one session (each new session loads botocore's endpoint rules again), each with only
its own hooks, and all of them forgotten, session included, by `reset_clients`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from ezgh_engine.adapters import aws


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
    aws.reset_clients()
    yield
    aws.reset_clients()


def test_threads_asking_at_once_share_one_client_made_from_one_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sessions: list[Any] = []
    real = aws._session

    def counted() -> Any:
        made = real()
        if made not in sessions:
            sessions.append(made)
        return made

    monkeypatch.setattr(aws, "_session", counted)
    start = threading.Barrier(8)
    got: list[Any] = []

    def ask() -> None:
        start.wait()
        got.append(aws.client("sqs"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 8 and all(c is got[0] for c in got)
    assert aws.client("dynamodb") is not got[0]
    assert aws.client("sqs", read_timeout=120) is not got[0]
    assert len(sessions) == 1


def test_a_clients_hooks_are_its_own() -> None:
    """The DynamoDB client's retry of a transaction cancelled for capacity is registered on
    it alone, though every client comes from the same session."""

    def handlers(made: Any) -> list[Any]:
        emitter = made.meta.events._emitter  # botocore's, behind its alias layer
        return list(emitter._handlers.prefix_search("needs-retry.dynamodb.TransactWriteItems"))

    ddb, sqs = aws.client("dynamodb"), aws.client("sqs")
    assert aws._retry_cancelled_for_capacity in handlers(ddb)
    assert aws._retry_cancelled_for_capacity not in handlers(sqs)


def test_reset_clients_forgets_the_session_and_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = aws.client("sqs")
    assert before._request_signer._credentials.access_key == "first-key"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    assert aws.client("sqs") is before  # made once, until a reset
    aws.reset_clients()
    after = aws.client("sqs")
    assert after is not before
    assert after._request_signer._credentials.access_key == "second-key"
