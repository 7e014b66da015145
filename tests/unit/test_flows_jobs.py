"""A job seen through EzFlow's names: statuses and actions mapped from a run and its steps."""

from __future__ import annotations

from typing import Any

from ezgh_engine.core.flows.jobs import JobInput, job_input, job_status, job_view, step_name
from ezgh_engine.core.models import Run, RunError, Step

GRAPH = {
    "nodes": [
        {"id": "t", "moduleType": "trigger.manual"},
        {"id": "c", "moduleType": "condition", "config": {"expression": "input.ok"}},
        {"id": "yes", "moduleType": "wait.event", "config": {"timeoutSeconds": 60}},
        {"id": "no", "moduleType": "transform", "config": {"expression": "in"}},
        {"id": "note", "moduleType": "comment"},
    ],
    "edges": [
        {"source": "t", "target": "c"},
        {"source": "c", "sourceHandle": "true", "target": "yes"},
        {"source": "c", "sourceHandle": "false", "target": "no"},
    ],
}
JOB = JobInput("flow-1", "commit-1", "main", GRAPH, {"ok": True}, "trk-9")
AT = "2026-01-01T00:00:00.000Z"


def _step(name: str, kind: Any = "run", status: Any = "completed", **extra: Any) -> Step:
    return Step(
        id=f"{name}#1",
        name=name,
        kind=kind,
        status=status,
        attempt=1,
        order=name,
        started_at=AT,
        **extra,
    )


def _run(status: Any, steps: list[Step], **extra: Any) -> Run:
    return Run(
        id="job-1",
        org_id="o",
        project_id="p",
        app_id="a",
        workflow="flow",
        status=status,
        input=JOB.to_run_input(),
        attempt=1,
        created_at=AT,
        started_at=AT,
        version=1,
        steps=tuple(steps),
        **extra,
    )


def _done(name: str, output: Any) -> Step:
    return _step(name, output=output, has_output=True, ended_at="2026-01-01T00:00:01.500Z")


def test_statuses_map_from_the_run_and_its_waiting_steps() -> None:
    waiting = _step(step_name("yes"), kind="callback", status="waiting")
    assert job_status(_run("running", [_done("node:t", {})])) == "RUNNING"
    assert job_status(_run("running", [waiting])) == "WAITING"
    child = _step(step_name("yes"), kind="invoke", status="waiting")
    assert job_status(_run("running", [child])) == "RUNNING"  # a child job is no event
    for run_status, job in (
        ("completed", "COMPLETED"),
        ("failed", "FAILED"),
        ("timedOut", "FAILED"),
        ("cancelled", "CANCELLED"),
    ):
        assert job_status(_run(run_status, [])) == job


def test_actions_carry_inputs_timing_tracking_and_the_resume_url() -> None:
    steps = [
        _step("job"),  # the interpreter's own step: no action
        _done("node:t", {"ok": True}),
        _done("node:c", {"result": True}),
        _step("node:yes", kind="callback", status="waiting"),
    ]
    view = job_view(_run("running", steps), JOB, lambda step: f"http://127.0.0.1/cb/{step.id}")
    assert view["status"] == "WAITING" and view["trackingId"] == "trk-9"
    actions = {a["nodeId"]: a for a in view["actions"]}
    assert list(actions) == ["t", "c", "yes", "no"]  # graph order; the comment never runs
    assert actions["t"]["durationMs"] == 1500 and actions["t"]["output"] == {"ok": True}
    assert actions["c"]["input"] == {"t": {"ok": True}}
    assert actions["yes"]["status"] == "WAITING"
    assert actions["yes"]["resumeUrl"] == "http://127.0.0.1/cb/node:yes#1"
    assert actions["no"]["status"] == "SKIPPED"
    assert {a["trackingId"] for a in actions.values()} == {"trk-9"}


def test_a_failed_job_names_its_node() -> None:
    error = RunError("user", "NodeFailedError", "node no failed")
    steps = [
        _done("node:t", {"ok": False}),
        _done("node:c", {"result": False}),
        _step("node:no", status="failed", error=RunError("user", "ModuleError", "bad")),
    ]
    view = job_view(
        _run("failed", steps, error=error, ended_at="2026-01-01T00:00:02.000Z"),
        JOB,
        lambda step: None,
    )
    assert view["status"] == "FAILED" and view["error"]["nodeId"] == "no"
    assert view["durationMs"] == 2000 and "output" not in view
    assert {a["nodeId"]: a["status"] for a in view["actions"]} == {
        "t": "COMPLETED",
        "c": "COMPLETED",
        "yes": "SKIPPED",
        "no": "FAILED",
    }


def test_a_run_started_with_a_flow_reference_reads_its_resolved_input() -> None:
    reference = {"flowId": "flow-1", "input": {"ok": True}}
    run = _run("running", [_done("job", JOB.to_run_input())])
    run = Run(**{**run.__dict__, "input": reference})
    assert job_input(run) == JOB
    unresolved = Run(**{**run.__dict__, "steps": ()})
    assert job_input(unresolved).flow_id == "flow-1" and job_input(unresolved).commit_id == ""
