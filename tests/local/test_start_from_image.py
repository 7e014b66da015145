"""A start of the local runtime from an image (of a clean stop, or of a checkpoint with the
journal's tail after it) adopts the resources that image's life provisioned (its tables,
queues, bucket, schedule group and recurring schedules are in the image, and nothing of the
engine deletes them) instead of asking the emulator for each again; any other start (a
whole replay, another topology) provisions as before."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local.emulator import Emulator
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.topology import TOPOLOGY, Queue, Topology

from .conftest import health_api

# What provisioning asks (or makes); a start that adopts asks none of it.
PROVISIONING = {
    "CreateTable",
    "DescribeTable",
    "UpdateTimeToLive",
    "CreateQueue",
    "GetQueueAttributes",
    "CreateBucket",
    "GetScheduleGroup",
    "CreateScheduleGroup",
    "CreateSchedule",
}


def _quiet(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"batchItemFailures": []}


def _runtime(state_dir: Path, topology: Topology = TOPOLOGY) -> LocalRuntime:
    """A kept-state runtime with stand-in handlers in its own threads (no environments)."""
    overrides: dict[str, Any] = {f.key: _quiet for f in topology.functions}
    return LocalRuntime(
        port=0,
        state_dir=state_dir,
        handler_overrides={**overrides, "api": health_api},
        bootstrap=lambda: ("org-1", "project-1", "key-1"),
        topology=topology,
        isolation="thread",
        persist=True,
    )


@pytest.fixture()
def asked() -> Iterator[list[str]]:
    """The operations the runtime's clients send while the test runs."""
    operations: list[str] = []
    stop = aws.observe(lambda record: operations.append(str(record["operation"])))
    yield operations
    stop()


def _started(
    state_dir: Path, asked: list[str], topology: Topology = TOPOLOGY
) -> tuple[LocalRuntime, set[str]]:
    asked.clear()
    runtime = _runtime(state_dir, topology).start()
    return runtime, set(asked) & PROVISIONING


def _crash(runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop without the image of this life, as a `kill -9` leaves the state dir."""
    with monkeypatch.context() as patch:
        patch.setattr(Emulator, "_save_image", lambda *args: None)
        runtime.stop()


def _moved(urls: dict[str, str], old: LocalRuntime, new: LocalRuntime) -> dict[str, str]:
    return {
        key: url.replace(old.emulator.endpoint_url, new.emulator.endpoint_url)
        for key, url in urls.items()
    }


def _receives(runtime: LocalRuntime) -> Callable[[str], list[str]]:
    sqs = aws.client("sqs")

    def receive(url: str) -> list[str]:
        answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0, MaxNumberOfMessages=10)
        return [m["Body"] for m in answer.get("Messages", [])]

    return receive


def test_a_start_from_the_image_adopts_what_its_life_provisioned(
    tmp_path: Path, asked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, provisioned = _started(tmp_path, asked)
    try:
        assert {"CreateTable", "CreateQueue", "CreateBucket"} <= provisioned
        made = first.provisioned
        event_queues = dict(first.async_invokes.queue_urls)
    finally:
        first.stop()
    second, provisioned = _started(tmp_path, asked)
    try:
        assert provisioned == set()
        done = second.provisioned
        assert done.tables == made.tables and done.stream_arns == made.stream_arns
        assert done.queue_arns == made.queue_arns
        assert done.queue_urls == _moved(made.queue_urls, first, second)
        assert done.dlq_urls == _moved(made.dlq_urls, first, second)
        assert second.async_invokes.queue_urls == _moved(event_queues, first, second)
        assert set(done.env) == set(made.env)
        for name, value in made.env.items():
            if value.startswith(first.emulator.endpoint_url):  # a queue's URL
                assert done.env[name] == _moved({name: value}, first, second)[name]
            elif not value.startswith("http://127.0.0.1:"):  # (this start's own servers)
                assert done.env[name] == value, name
        assert done.env["EZGH_ENGINE_API_URL"] == second.api_url
        # The adopted URLs are the queues of this emulator, with what they held.
        aws.client("sqs").send_message(QueueUrl=done.queue_urls["invocations"], MessageBody="x")
        assert _receives(second)(done.dlq_urls["invocations"]) == []
        second.wait_idle(timeout=30)  # the invocations poller took it (a stand-in handler)
    finally:
        _crash(second, monkeypatch)
    third, provisioned = _started(tmp_path, asked)  # the first life's image and a tail
    try:
        assert provisioned == set()
        assert third.provisioned.queue_urls == _moved(made.queue_urls, first, third)
    finally:
        _crash(third, monkeypatch)
    (tmp_path / "aws" / "image.pickle").unlink()
    fourth, provisioned = _started(tmp_path, asked)  # a whole replay: nothing kept to adopt
    try:
        assert {"CreateTable", "CreateQueue"} <= provisioned
        assert fourth.provisioned.tables == made.tables
        assert fourth.provisioned.queue_urls == _moved(made.queue_urls, first, fourth)
    finally:
        fourth.stop()


def test_another_topology_provisions_what_the_image_lacks(tmp_path: Path, asked: list[str]) -> None:
    first, _ = _started(tmp_path, asked)
    first.stop()
    extra = Queue(key="extra", env_var="EZGH_EXTRA_QUEUE_URL")
    grown = dataclasses.replace(TOPOLOGY, queues=(*TOPOLOGY.queues, extra))
    second, provisioned = _started(tmp_path, asked, grown)
    try:
        assert "CreateQueue" in provisioned
        url = second.provisioned.queue_urls["extra"]
        assert second.provisioned.env["EZGH_EXTRA_QUEUE_URL"] == url
        assert url.startswith(f"{second.emulator.endpoint_url}/")
    finally:
        second.stop()
    third, provisioned = _started(tmp_path, asked, grown)  # that topology's own image
    try:
        assert provisioned == set()
        assert third.provisioned.queue_urls["extra"].startswith(third.emulator.endpoint_url)
    finally:
        third.stop()
