"""What the engine emits of a fact, checked as documents: the EMF document (CloudWatch's
embedded metric format), the structured JSON log line with the work's IDs, the X-Ray
segment documents, the queue and throttle counts."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.core import run_facts as rf
from ezgh_engine.core import trace_ids as ti
from ezgh_engine.observability import emit, logs, metrics, names, queues, sinks, traces

CREATED = "2026-12-05T10:00:00.000Z"


@pytest.fixture()
def telemetry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(sinks.ENV_TELEMETRY_DIR, str(tmp_path))
    monkeypatch.setenv("EZGH_STACK_PREFIX", "prod")
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv(names.ENV_NAMESPACE, raising=False)
    metrics.reset()
    yield tmp_path
    metrics.reset()


def _documents(where: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (where / sinks.METRICS_FILE).read_text().splitlines()]


def _fact(kind: str, **changes: Any) -> rf.Fact:
    base: dict[str, Any] = {
        "at": "2026-12-05T10:00:02.000Z",
        "created_at": CREATED,
        "app_id": "a1",
        "workflow": "charge",
    }
    return rf.Fact(kind=kind, run_id="r1", **{**base, **changes})


def test_facts_become_one_emf_document_per_dimension_set(telemetry: Path) -> None:
    emit.record(_fact(rf.RUN_STARTED, status="running"))
    ended = _fact(rf.RUN_ENDED, status="failed", started_at=CREATED, error_code="user")
    emit.record(ended)
    step = _fact(rf.STEP_RETRYING, started_at="2026-12-05T10:00:01.500Z", step_kind="run")
    emit.record(step)
    queues.record_batch(
        {
            "Records": [
                {
                    "eventSource": "aws:sqs",
                    "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "0"},
                },
                {
                    "eventSource": "aws:sqs",
                    "attributes": {"ApproximateReceiveCount": "3", "SentTimestamp": "0"},
                },
            ]
        },
        "notifications",
    )
    emit.flush()
    main, queue = sorted(_documents(telemetry), key=lambda d: "Queue" in d)
    (directive,) = main["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "EZGH" and directive["Dimensions"] == [["service"]]
    assert main["service"] == "prod"
    assert main["RunsStarted"] == [1.0] and main["RunsFailed"] == [1.0]
    assert main["RunDuration"] == [2000.0] and main["StepDuration"] == [500.0]
    assert main["StepRetries"] == [1.0]
    units = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert units["RunDuration"] == "Milliseconds" and units["RunsStarted"] == "Count"
    (queued,) = queue["_aws"]["CloudWatchMetrics"]
    assert sorted(queued["Dimensions"][0]) == ["Queue", "service"]
    assert queue["Queue"] == "notifications" and queue["Redeliveries"] == [1.0]
    assert queue["QueueAge"][0] > 1e9  # sent at the epoch: seconds since
    emit.flush()  # nothing new: no document
    assert len(_documents(telemetry)) == 2


def test_a_set_is_written_before_emf_s_100_values(telemetry: Path) -> None:
    for _ in range(250):
        metrics.add(names.THROTTLES, 1)
    emit.flush()
    sizes = [len(d["Throttles"]) for d in _documents(telemetry)]
    assert sum(sizes) == 250 and max(sizes) < 100


def test_throttles_are_counted_where_the_clients_retry_them(telemetry: Path) -> None:
    throttled = ({}, {"Error": {"Code": "ProvisionedThroughputExceededException"}})
    assert aws._count_throttle(response=throttled) is None  # it decides nothing
    aws._count_throttle(response=({}, {"Error": {"Code": "ConditionalCheckFailedException"}}))
    aws._count_throttle(response=({}, {"Items": []}))
    emit.flush()
    (document,) = _documents(telemetry)
    assert document["Throttles"] == [1.0]


def test_metrics_off_writes_nothing(telemetry: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    emit.record(_fact(rf.RUN_STARTED))
    emit.flush()
    assert not (telemetry / sinks.METRICS_FILE).exists()
    assert "started" in (telemetry / sinks.LINES_FILE).read_text()  # the line still is


def test_lambda_logs_are_json_with_the_works_ids(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In Lambda every line an engine module writes through stdlib logging is Powertools'
    JSON, with the IDs bound where the work began."""
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "ezgh-test")
    engine = logging.getLogger(logs.ENGINE_LOGGER)
    saved = (list(engine.handlers), engine.propagate, engine.level)
    try:
        logs.configure("ezgh-unit-logs")
        with logs.bound(run_id="r1", invocation_id="i1"), logs.bound(step_id="s1"):
            logging.getLogger("ezgh_engine.service.invoker").warning("run %s: lost", "r1")
        logging.getLogger("ezgh_engine.service.stream").warning("outside")
    finally:
        engine.handlers[:], engine.propagate = saved[0], saved[1]
        engine.setLevel(saved[2])
    first, second = (json.loads(x) for x in capsys.readouterr().out.splitlines()[-2:])
    assert first["message"] == "run r1: lost" and first["level"] == "WARNING"
    assert (first["run_id"], first["invocation_id"], first["step_id"]) == ("r1", "i1", "s1")
    assert first["service"] == "ezgh-unit-logs"
    assert first["name"] == "ezgh_engine.service.invoker"
    assert "run_id" not in second


def test_a_completed_step_and_a_wait_log_at_debug_and_the_rest_at_info(
    telemetry: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """CloudWatch Logs bills each line's bytes: a run writes a line per step only with
    `LOG_LEVEL=DEBUG`; its start, end, invocations and failures are always written. The
    `ezgh dev` lines show every fact either way."""
    caplog.set_level(logging.DEBUG, logger="ezgh_engine.observability.emit")
    facts = [
        _fact(rf.RUN_STARTED, status="running"),
        _fact(rf.STEP_ENDED, status="completed", step_id="s#1", step_kind="run"),
        _fact(rf.STEP_WAITING, status="waiting", step_id="w#1", step_kind="sleep"),
        _fact(rf.STEP_ENDED, status="failed", step_id="s#2", step_kind="run"),
        _fact(rf.RUN_ENDED, status="failed"),
    ]
    for fact in facts:
        emit.record(fact)
    levels = [(r.fact, r.status, r.levelname) for r in caplog.records]  # type: ignore[attr-defined]
    assert levels == [
        (rf.RUN_STARTED, "running", "INFO"),
        (rf.STEP_ENDED, "completed", "DEBUG"),
        (rf.STEP_WAITING, "waiting", "DEBUG"),
        (rf.STEP_ENDED, "failed", "INFO"),
        (rf.RUN_ENDED, "failed", "INFO"),
    ]
    assert len((telemetry / sinks.LINES_FILE).read_text().splitlines()) == len(facts)


def test_a_runs_trace_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(traces.ENV_SAMPLE_RATE, "1")
    sent: list[list[str]] = []
    monkeypatch.setattr("ezgh_engine.adapters.xray.put_segments", sent.append)
    emit.record(_fact(rf.RUN_STARTED, status="running", at=CREATED))
    emit.record(
        _fact(rf.INVOCATION, status="suspended", started_at="2026-12-05T10:00:00.100Z",
              invocation_id="i1"),
        app_name="billing", invocation_began="2026-12-05T10:00:00.050Z",
    )  # fmt: skip
    emit.record(_fact(rf.STEP_ENDED, status="completed", started_at=CREATED, step_id="pay#1",
                      step_name="pay", step_kind="run"))  # fmt: skip
    emit.record(_fact(rf.RUN_ENDED, status="completed", started_at=CREATED))
    traces.flush()
    (batch,) = sent
    started, invocation, step, ended = (json.loads(d) for d in batch)
    trace, root = ti.trace_id("r1", CREATED), ti.run_span("r1")
    assert {d["trace_id"] for d in (started, invocation, step, ended)} == {trace}
    assert started["id"] == ended["id"] == root and started["in_progress"] is True
    assert ended["end_time"] - ended["start_time"] == 2.0 and "in_progress" not in ended
    assert invocation["parent_id"] == root and invocation["name"] == traces.INVOKER_SEGMENT
    (app,) = invocation["subsegments"]
    assert app["id"] == ti.app_span("r1", "i1") and app["name"] == "billing"
    assert app["start_time"] - invocation["start_time"] == pytest.approx(0.05)
    assert step["type"] == "subsegment" and step["parent_id"] == root
    assert step["name"] == "run pay" and step["annotations"]["attempt"] == 1


def test_unsampled_runs_send_no_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(traces.ENV_SAMPLE_RATE, "0")
    emit.record(_fact(rf.RUN_STARTED))
    assert traces.pending() == []


def test_a_trace_that_cannot_be_sent_fails_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(traces.ENV_SAMPLE_RATE, "1")

    def refuse(documents: list[str]) -> None:
        raise RuntimeError("throttled")

    monkeypatch.setattr("ezgh_engine.adapters.xray.put_segments", refuse)
    emit.record(_fact(rf.RUN_STARTED))
    emit.flush()  # logged, not raised
    assert traces.pending() == []
