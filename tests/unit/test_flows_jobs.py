"""A job seen through EzFlow's names: statuses and actions mapped from a run and its steps."""

from __future__ import annotations

from typing import Any

from ezgh_engine.core.flows.jobs import (
    Actor,
    JobInput,
    job_input,
    job_status,
    job_summary,
    job_view,
    node_of,
    step_name,
    wait_step_name,
)
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
JOB = JobInput(
    "flow-1",
    "commit-1",
    AT := "2026-01-01T00:00:00.000Z",
    "main",
    {"ok": True},
    "trk-9",
    Actor("key-1", "api"),
)


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
        _step("wait:yes", kind="callback", status="waiting"),
    ]
    view = job_view(
        _run("running", steps), JOB, GRAPH, lambda step: f"http://127.0.0.1/cb/{step.id}"
    )
    assert view["status"] == "WAITING" and view["trackingId"] == "trk-9"
    actions = {a["nodeId"]: a for a in view["actions"]}
    assert list(actions) == ["t", "c", "yes", "no"]  # graph order; the comment never runs
    assert actions["t"]["durationMs"] == 1500 and actions["t"]["output"] == {"ok": True}
    assert actions["c"]["input"] == {"t": {"ok": True}}
    assert actions["yes"]["status"] == "WAITING"
    assert actions["yes"]["resumeUrl"] == "http://127.0.0.1/cb/wait:yes#1"
    assert actions["no"]["status"] == "SKIPPED"
    assert {a["trackingId"] for a in actions.values()} == {"trk-9"}


def test_a_failed_job_names_its_node() -> None:
    error = RunError("user", "NodeFailedError", "node no (transform) failed: ModuleError: bad")
    steps = [
        _done("node:t", {"ok": False}),
        _done("node:c", {"result": False}),
        _step("node:no", status="failed", error=RunError("user", "ModuleError", "bad")),
    ]
    view = job_view(
        _run("failed", steps, error=error, ended_at="2026-01-01T00:00:02.000Z"),
        JOB,
        GRAPH,
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


def test_the_run_input_is_the_engines_job_input_and_carries_no_graph() -> None:
    run = _run("running", [])
    assert job_input(run) == JOB
    assert "graph" not in run.input and run.input["actor"] == {"keyId": "key-1", "via": "api"}
    forged = JobInput.from_run_input({**run.input, "actor": {"keyId": 7}})
    assert forged.actor is None  # a malformed actor acts for no key (the node is refused)


def test_wait_nodes_steps_have_their_own_prefix_and_the_same_node() -> None:
    assert wait_step_name("yes") == "wait:yes"
    assert node_of("wait:yes") == node_of("node:yes") == node_of("node:yes:config") == "yes"
    assert node_of("job") is None


def test_a_listed_job_names_its_failed_node_without_its_steps() -> None:
    error = RunError("user", "NodeFailedError", "node no (transform) failed: ModuleError: bad")
    run = _run("failed", [], error=error, ended_at="2026-01-01T00:00:02.000Z")
    listed = job_summary(run, JOB, waiting=False)
    assert listed["status"] == "FAILED" and listed["error"]["nodeId"] == "no"
    assert "actions" not in listed
    assert job_summary(_run("running", []), JOB, waiting=True)["status"] == "WAITING"
