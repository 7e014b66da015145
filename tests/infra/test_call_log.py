"""`ezgh_engine.local.call_log`: every AWS request of a function, one JSON line each, on moto's
server on loopback (the recording tests/infra/test_iam_calls.py checks against the policies)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local import call_log
from ezgh_engine.local.emulator import Emulator


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    emu = Emulator()
    emu.start()
    yield emu
    emu.stop()


@pytest.fixture()
def log_dir(emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    emulator.reset()
    monkeypatch.setenv(call_log.ENV_CALL_LOG, str(tmp_path / "calls"))
    yield tmp_path / "calls"
    call_log.uninstall()


def lines(directory: Path) -> list[dict[str, Any]]:
    if not directory.exists():
        return []
    return [json.loads(line) for f in sorted(directory.glob("*.jsonl")) for line in f.open()]


def test_requests_are_recorded_per_function_with_naming_params(log_dir: Path) -> None:
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="call-log")  # outside any function: not recorded
    body = b"x" * 200_000
    with call_log.running("api"):
        s3.put_object(Bucket="call-log", Key="a/b.json", Body=body)
        # A streamed answer stays the caller's to read (observing used to consume it).
        assert s3.get_object(Bucket="call-log", Key="a/b.json")["Body"].read() == body
    with call_log.running("steps"):
        aws.client("sqs").create_queue(QueueName="call-log-q")
    got = lines(log_dir)
    assert [(g["function"], g["service"], g["operation"]) for g in got] == [
        ("api", "s3", "PutObject"),
        ("api", "s3", "GetObject"),
        ("steps", "sqs", "CreateQueue"),
    ]
    assert got[0]["params"] == {"Bucket": "call-log", "Key": "a/b.json"}  # no Body
    assert got[2]["params"] == {"QueueName": "call-log-q"}
    assert {p.name.split("-")[0] for p in log_dir.glob("*.jsonl")} == {"api", "steps"}


def test_install_names_the_process_function_and_running_wins(log_dir: Path) -> None:
    call_log.install("stream")
    ddb = aws.client("dynamodb")
    ddb.list_tables()
    with call_log.running("notify"):
        ddb.list_tables()
    assert sorted(g["function"] for g in lines(log_dir)) == ["notify", "stream"]


def test_transactions_keep_their_tables_and_kinds() -> None:
    params = {
        "TransactItems": [
            {"Put": {"TableName": "t1", "Item": {"pk": {"S": "secret"}}}},
            {"ConditionCheck": {"TableName": "t2", "Key": {}}},
        ]
    }
    assert call_log.trim("dynamodb", "TransactWriteItems", params) == {
        "TransactItems": [{"Put": "t1"}, {"ConditionCheck": "t2"}]
    }
    target = {"Arn": "arn:q", "RoleArn": "arn:r", "Input": "{}"}
    assert call_log.trim("scheduler", "CreateSchedule", {"Name": "n", "Target": target}) == {
        "Name": "n",
        "Target": {"Arn": "arn:q", "RoleArn": "arn:r"},
    }


def test_assume_role_keeps_the_role_not_the_session_policy() -> None:
    """The IAM check needs the role an AssumeRole names (pull workers' queue credentials);
    without it the call was recorded as `{}` and checked against `*`."""
    params = {"RoleArn": "arn:aws:iam::1:role/w", "RoleSessionName": "s", "Policy": "{}"}
    assert call_log.trim("sts", "AssumeRole", params) == {"RoleArn": "arn:aws:iam::1:role/w"}


def test_nothing_is_observed_without_the_variable(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(call_log.ENV_CALL_LOG, raising=False)
    before = list(aws._observers)
    with call_log.running("api"):
        aws.client("dynamodb").list_tables()
    assert aws._observers == before
