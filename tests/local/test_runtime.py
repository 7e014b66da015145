"""LocalRuntime with stand-in handlers (fast, no engine code), plus `ezgh dev`'s parser (the
command itself runs in tests/console/test_dev_link.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.cli.main import build_parser
from ezgh_engine.local.apps import app_name
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.service import sqs_batch

from .conftest import health_api


class Recorder:
    def __init__(self) -> None:
        self.stream: list[dict[str, Any]] = []
        self.invoker: list[str] = []
        self.lock = threading.Lock()

    def on_stream(self, event: dict[str, Any], context: Any) -> None:
        with self.lock:
            self.stream.extend(event["Records"])
        # Like the real stream handler: a committed write causes an invocation message.
        for record in event["Records"]:
            if record["eventName"] == "INSERT":
                aws.client("sqs").send_message(
                    QueueUrl=os.environ["EZGH_INVOCATIONS_QUEUE_URL"],
                    MessageBody=record["dynamodb"]["Keys"]["pk"]["S"],
                )

    def on_invoke(self, event: dict[str, Any], context: Any) -> Any:
        assert context.get_remaining_time_in_millis() > 0
        with self.lock:
            self.invoker.extend(r["body"] for r in event["Records"])
        hold = self.hold

        def on_record(record: dict[str, Any]) -> None:
            if hold is not None and record["body"].startswith("HOLD#"):
                hold.wait()  # BrokenBarrierError unless enough are in flight at once

        # As the invoker does: a batch's records at once (`service.invocation_queue`).
        answer = sqs_batch.process_at_once(event, on_record)
        assert answer == {"batchItemFailures": []}
        return answer

    hold: threading.Barrier | None = None


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def runtime(recorder: Recorder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    rt = LocalRuntime(
        port=0,
        state_dir=tmp_path_factory.mktemp("ezgh"),
        clock=clock.SkipClock(),
        handler_overrides={
            "api": health_api,
            "stream": recorder.on_stream,
            "invoker": recorder.on_invoke,
        },
        bootstrap=lambda: ("org-1", "project-1", "key-1"),
    )
    rt.start()
    yield rt
    rt.stop()


@pytest.fixture()
def engine(runtime: LocalRuntime, recorder: Recorder) -> LocalRuntime:
    runtime.reset()
    recorder.stream.clear()
    recorder.invoker.clear()
    return runtime


def test_start_writes_dev_env_and_serves_health(engine: LocalRuntime) -> None:
    assert httpx.get(f"{engine.api_url}/v1/health").json() == {"status": "ok"}
    lines = (engine.state_dir / "dev.env").read_text().splitlines()
    assert lines == [
        f"EZGH_API_URL={engine.api_url}",
        "EZGH_API_KEY=key-1",
        "EZGH_ORG_ID=org-1",
        "EZGH_PROJECT_ID=project-1",
    ]
    assert os.environ["EZGH_API_KEY"] == "key-1"
    assert os.environ["EZGH_ALLOW_LOOPBACK_APPS"] == "1"
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


def test_stream_to_queue_to_invoker_then_idle(engine: LocalRuntime, recorder: Recorder) -> None:
    table = os.environ["EZGH_RUNS_TABLE"]
    for i in range(3):
        aws.client("dynamodb").put_item(
            # The topology's stream filter passes run items without a lease (and steps).
            TableName=table,
            Item={
                "pk": {"S": f"RUN#{i}"},
                "sk": {"S": "RUN"},
                "type": {"S": "run"},
                "leaseUntil": {"N": "0"},
            },
        )
    engine.wait_idle(timeout=60)
    assert sorted(recorder.invoker) == ["RUN#0", "RUN#1", "RUN#2"]
    assert len(recorder.stream) == 3


def test_invocations_run_as_concurrently_as_the_topology_allows(
    engine: LocalRuntime, recorder: Recorder
) -> None:
    """The invocations queue's poller takes as many batches at once as the invoker function's
    concurrency (`local_concurrency`), as Lambda's SQS mapping scales the function, and a
    batch's records are handled at once: an invocation waiting on the app must not keep
    the next one waiting, whether they came in one batch or in several."""
    from ezgh_engine.topology import INVOKER_FUNCTION

    at_once = 8
    assert INVOKER_FUNCTION.local_concurrency >= at_once
    recorder.hold = threading.Barrier(at_once, timeout=60)
    try:
        for i in range(at_once):
            aws.client("sqs").send_message(
                QueueUrl=os.environ["EZGH_INVOCATIONS_QUEUE_URL"], MessageBody=f"HOLD#{i}"
            )
        engine.wait_idle(timeout=120)
        assert not recorder.hold.broken, "fewer invocations ran at once than the topology allows"
    finally:
        recorder.hold = None
    assert sorted(recorder.invoker) == [f"HOLD#{i}" for i in range(at_once)]


def test_reset_empties_everything(engine: LocalRuntime, recorder: Recorder) -> None:
    table = os.environ["EZGH_RUNS_TABLE"]
    run = {"type": {"S": "run"}, "leaseUntil": {"N": "0"}}
    aws.client("dynamodb").put_item(
        TableName=table, Item={"pk": {"S": "x"}, "sk": {"S": "y"}, **run}
    )
    engine.wait_idle(timeout=60)
    engine.reset()
    assert aws.client("dynamodb").scan(TableName=table)["Items"] == []
    aws.client("dynamodb").put_item(
        TableName=table, Item={"pk": {"S": "z"}, "sk": {"S": "y"}, **run}
    )
    engine.wait_for(lambda: "z" in recorder.invoker, timeout=60)  # pollers follow the reset


def test_scheduler_timer_with_skip_clock(engine: LocalRuntime, recorder: Recorder) -> None:
    assert isinstance(engine.clock, clock.SkipClock)
    due = clock.now() + timedelta(days=3)
    aws.client("scheduler").create_schedule(
        Name="wake",
        GroupName=os.environ["EZGH_SCHEDULER_GROUP"],
        ScheduleExpression=f"at({due.strftime('%Y-%m-%dT%H:%M:%S')})",
        FlexibleTimeWindow={"Mode": "OFF"},
        ActionAfterCompletion="DELETE",
        Target={
            "Arn": os.environ["EZGH_INVOCATIONS_QUEUE_ARN"],
            "RoleArn": os.environ["EZGH_SCHEDULER_ROLE_ARN"],
            "Input": "timer",
        },
    )
    engine.wait_idle(timeout=60)
    assert recorder.invoker == []
    engine.clock.advance(timedelta(days=3, seconds=1))
    engine.wait_idle(timeout=60)
    assert recorder.invoker == ["timer"]


def test_wait_idle_reports_what_is_busy(engine: LocalRuntime) -> None:
    aws.client("sqs").send_message(
        QueueUrl=os.environ["EZGH_INVOCATIONS_QUEUE_URL"], MessageBody="later", DelaySeconds=5
    )
    with pytest.raises(TimeoutError, match="queue invocations"):
        engine.wait_idle(timeout=0.3)
    engine.wait_idle(timeout=60, include_delayed=False)


def test_app_names() -> None:
    assert app_name("examples.onboarding", "app") == "onboarding"
    assert app_name("examples.billing", "Billing_Jobs") == "billing-jobs"
    assert app_name("m", "___") == "app"


def test_cli_parses_the_contract_flags() -> None:
    args = build_parser().parse_args(
        ["dev", "--port", "9000", "--state-dir", "s", "--app", "a:b", "--app", "c:d"]
    )
    assert (args.command, args.port, args.state_dir, args.app) == ("dev", 9000, "s", ["a:b", "c:d"])
    defaults = build_parser().parse_args(["dev"])
    assert (defaults.port, defaults.state_dir, defaults.app) == (8288, ".ezgh", [])
