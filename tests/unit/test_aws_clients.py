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


def test_a_new_session_keeps_the_models_the_last_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reset (new credentials or endpoint) drops the session, not botocore's data loader:
    the next session's clients are made from the models already read, for the new
    credentials, and boto3's data path is listed once however many sessions are made."""
    aws.client("sqs")
    loader = aws._session()._loader
    for key in ("second-key", "third-key"):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        aws.reset_clients()
        made = aws.client("sqs")
        assert made._request_signer._credentials.access_key == key
        assert aws._session()._loader is loader
    assert len(loader.search_paths) == len(set(loader.search_paths))


def test_models_are_read_without_the_environments_credentials_or_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`load_models` (the forkserver's warm-up) makes no client of the process's own: a
    client asked for afterwards is made for the variables then set."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    aws.load_models(["sqs", "dynamodb"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:7")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "later-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "later-secret")
    aws.reset_clients()
    made = aws.client("dynamodb")
    assert made.meta.endpoint_url == "http://127.0.0.1:7"
    assert made._request_signer._credentials.access_key == "later-key"
