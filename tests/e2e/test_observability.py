"""What runs do, shown by the same code paths as deployed: a failed run (a step retried, then
failed) and a slow one (a three-day sleep) under the local runtime, and what each left:

- `ezgh dev`'s lines (one per run start, invocation, step end, wait and run end);
- the EMF documents (CloudWatch's embedded metric format) the functions wrote;
- the run's trace as X-Ray segment documents, read back from the emulator's X-Ray (the
  functions sent them with `PutTraceSegments`, as deployed);
- the trace context the app was given, which its own spans would join.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.adapters.aws import client as aws_client
from ezgh_engine.core import trace_ids
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.observability import names, sinks, traces

from tests.e2e.test_durable_runs import wait_ended, wait_sleeping
from tests.e2e.workflows_app import SEEN

pytestmark = pytest.mark.e2e


@pytest.fixture()
def telemetry(engine: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every function writes its EMF documents and lines under `tmp_path`, and records every
    run's trace (the variables travel with each call to the execution environments)."""
    monkeypatch.setenv(sinks.ENV_TELEMETRY_DIR, str(tmp_path))
    monkeypatch.setenv(traces.ENV_SAMPLE_RATE, "1")
    return tmp_path


def _lines(where: Path, run_id: str) -> list[str]:
    path = where / sinks.LINES_FILE
    text = path.read_text() if path.exists() else ""
    return [line for line in text.splitlines() if f"run {run_id} " in line]


def _wait_lines(engine: LocalRuntime, where: Path, run_id: str, last: str) -> list[str]:
    """The run's lines once one holds `last` (the observe reader runs after the commit)."""
    return engine.wait_for(
        lambda: (lambda found: found if any(last in x for x in found) else None)(
            _lines(where, run_id)
        ),
        30,
    )


def _documents(where: Path) -> list[dict[str, Any]]:
    """The EMF documents written so far (whole lines: one may be half written)."""
    path = where / sinks.METRICS_FILE
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def _wait_documents(engine: LocalRuntime, where: Path, *names: str) -> list[dict[str, Any]]:
    """The EMF documents once each of `names` has a value: the metrics of a run's end are
    written by the function that reads its commit, which may come after the run's last line
    (another function's) on a loaded machine."""
    return engine.wait_for(
        lambda: (lambda found: found if all(_values(found, n) for n in names) else None)(
            _documents(where)
        ),
        30,
    )


def _values(documents: list[dict[str, Any]], name: str) -> list[float]:
    found: list[float] = []
    for document in documents:
        if name in document:
            found.extend(document[name])
    return found


def _segments(engine: LocalRuntime, run: dict[str, Any]) -> list[dict[str, Any]]:
    trace = trace_ids.trace_id(run["id"], run["createdAt"])

    def read() -> list[dict[str, Any]] | None:
        answer = aws_client("xray").batch_get_traces(TraceIds=[trace])
        docs = [json.loads(s["Document"]) for t in answer["Traces"] for s in t["Segments"]]
        ended = any(d["name"] == traces.RUN_SEGMENT and "end_time" in d for d in docs)
        return docs if ended else None

    return engine.wait_for(read, 30)


def _one_emf_shape(document: dict[str, Any]) -> None:
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    # The configured namespace (`EZGH` deployed; `ezgh dev` defaults to `EzghLocal`).
    assert directive["Namespace"] == os.environ.get(names.ENV_NAMESPACE, names.NAMESPACE)
    assert document["service"] == "ezgh"
    for dimensions in directive["Dimensions"]:
        assert set(dimensions) <= {"service", "Queue"}  # nothing per run, app or workflow
    for metric in directive["Metrics"]:
        assert metric["Unit"] in ("Count", "Milliseconds", "Seconds")
        assert metric["Name"] in document


def test_a_failed_run_shows_its_retries_lines_metrics_and_trace(engine, client, app_id, telemetry):
    run = client.start_run(app_id, "flaky", {"succeed_on": 9, "retries": 1})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "failed", done
    lines = _wait_lines(engine, telemetry, run["id"], "ended     failed")
    print("\n".join(lines))
    kinds = [line.split()[2] for line in lines]
    assert kinds[0] == "started" and kinds[-1] == "ended"
    assert "invoked" in kinds
    assert any("call#1 run failed (attempt 1), retry at" in x for x in lines), lines
    assert any("call#1 run failed (attempt 2) in" in x and ": user" in x for x in lines), lines

    documents = _wait_documents(
        engine, telemetry, "RunsStarted", "RunsFailed", "StepRetries", "InvocationLatency"
    )
    for document in documents:
        _one_emf_shape(document)
    assert _values(documents, "RunsStarted") and _values(documents, "RunsFailed")
    assert _values(documents, "StepRetries") and len(_values(documents, "StepDuration")) >= 2
    assert _values(documents, "InvocationLatency")

    segments = _segments(engine, done)
    print(json.dumps(segments, indent=1)[:3000])
    root = next(s for s in segments if s["name"] == traces.RUN_SEGMENT and "end_time" in s)
    assert root["error"] is True and root["annotations"]["status"] == "failed"
    steps = [s for s in segments if s.get("type") == "subsegment"]
    assert sorted(s["annotations"]["attempt"] for s in steps) == [1, 2]
    assert all(s["parent_id"] == root["id"] and s.get("error") for s in steps)
    invocations = [s for s in segments if s["name"] == traces.INVOKER_SEGMENT]
    assert invocations and all(s["parent_id"] == root["id"] for s in invocations)


def test_a_slow_run_shows_its_wait_and_the_app_joins_its_trace(engine, client, app_id, telemetry):
    run = client.start_run(app_id, "onboarding", {"userId": "u_1"})
    wait_sleeping(engine, client, run["id"])
    _wait_lines(engine, telemetry, run["id"], "waits     cooldown")
    engine.clock.advance(timedelta(days=3, seconds=1))
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    lines = _wait_lines(engine, telemetry, run["id"], "ended     completed")
    print("\n".join(lines))
    assert any("waits     cooldown#1 sleep until" in x for x in lines), lines
    assert any(x.endswith("cooldown#1 sleep completed in 3 d 0 h 0 min") for x in lines), lines
    ended = lines[-1]
    assert "ended     completed after 3 d 0 h 0 min" in ended

    durations = _values(_wait_documents(engine, telemetry, "RunDuration"), "RunDuration")
    assert max(durations) >= 3 * 86400 * 1000

    segments = _segments(engine, done)
    root = next(s for s in segments if s["name"] == traces.RUN_SEGMENT and "end_time" in s)
    assert root["end_time"] - root["start_time"] >= 3 * 86400
    sleep = next(s for s in segments if s.get("name", "").startswith("sleep cooldown"))
    assert sleep["end_time"] - sleep["start_time"] >= 3 * 86400
    # The app was told its invocation's span in the run's trace: what its spans join.
    given = SEEN["trace"]
    invocation_ids = {s["annotations"]["invocation_id"] for s in segments if "subsegments" in s}
    apps = {s["subsegments"][0]["id"] for s in segments if "subsegments" in s}
    trace = root["trace_id"]
    for context in given:
        if context["run_id"] != run["id"]:
            continue
        assert context["traceparent"].split("-")[1] == trace[2:].replace("-", "")
        assert context["traceparent"].split("-")[2] in apps
        assert context["traceparent"].endswith("-01") and context["same"]
    assert invocation_ids
