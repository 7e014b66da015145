"""A job seen through EzFlow's names: a run of the interpreter workflow and its steps.

- A job's id is the run's id; its status maps from the run's (running -> `RUNNING`, or
  `WAITING` while a node's step sleeps or waits for an event; completed -> `COMPLETED`;
  failed and timedOut -> `FAILED`; cancelled -> `CANCELLED`).
- Each node runs as a step named `node:<nodeId>` (`step_name`); a node that needs more than one
  step names the others `node:<nodeId>:<part>`. An action is the node's main step (or its last
  helper step while the main one has not started), with the node's input rebuilt from the
  recorded outputs of its upstream nodes, and nodes skipped by a condition added as `SKIPPED`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ezgh_engine import clock
from ezgh_engine.core.flows.graph import parse_graph
from ezgh_engine.core.flows.planning import COMPLETED, Done, Plan
from ezgh_engine.core.models import Run, Step

INTERPRETER_APP = "ezgh-flows"
INTERPRETER_WORKFLOW = "flow"
_PREFIX = "node:"
JOB_STEP = "job"  # the interpreter's first step: the job's resolved input (see `job_input`)

_RUN_STATUS = {
    "completed": "COMPLETED",
    "failed": "FAILED",
    "timedOut": "FAILED",
    "cancelled": "CANCELLED",
}
_STEP_STATUS = {
    "running": "RUNNING",
    "retrying": "RUNNING",
    "completed": "COMPLETED",
    "failed": "FAILED",
    "cancelled": "CANCELLED",
    "sleeping": "WAITING",
    "waiting": "WAITING",
}
_EVENT_KINDS = ("sleep", "callback", "message")  # a wait for an event or a delay


def step_name(node_id: str, part: str | None = None) -> str:
    """The step name of a node (`node:<id>`), or of one of its helper steps."""
    return f"{_PREFIX}{node_id}" + (f":{part}" if part else "")


def node_of(name: str) -> str | None:
    """The node id a step name belongs to (None for the interpreter's own steps)."""
    if not name.startswith(_PREFIX):
        return None
    return name[len(_PREFIX) :].split(":", 1)[0]


@dataclass(frozen=True)
class JobInput:
    """The interpreter run's input: the flow, the commit's graph, the job's input."""

    flow_id: str
    commit_id: str
    branch: str
    graph: dict[str, Any]
    input: Any
    tracking_id: str

    def to_run_input(self) -> dict[str, Any]:
        return {
            "flowId": self.flow_id,
            "commitId": self.commit_id,
            "branch": self.branch,
            "graph": self.graph,
            "input": self.input,
            "trackingId": self.tracking_id,
        }

    @classmethod
    def from_run_input(cls, value: Any) -> JobInput:
        data = value if isinstance(value, dict) else {}
        return cls(
            flow_id=str(data.get("flowId", "")),
            commit_id=str(data.get("commitId", "")),
            branch=str(data.get("branch", "")),
            graph=data.get("graph") or {"nodes": [], "edges": []},
            input=data.get("input"),
            tracking_id=str(data.get("trackingId", "")),
        )


def job_input(run: Run) -> JobInput:
    """The job's input: the run's, or (a run started with a flow reference) the one its first
    step resolved."""
    given = JobInput.from_run_input(run.input)
    if given.commit_id:
        return given
    for step in run.steps:
        if step.name == JOB_STEP and step.status == "completed" and isinstance(step.output, dict):
            return JobInput.from_run_input(step.output)
    data = run.input if isinstance(run.input, dict) else {}
    return JobInput(
        str(data.get("flowId", "")),
        "",
        str(data.get("branch") or ""),
        {"nodes": [], "edges": []},
        data.get("input"),
        str(data.get("trackingId", "")),
    )


def is_waiting_step(step: Step) -> bool:
    return step.kind in _EVENT_KINDS and step.status in ("sleeping", "waiting")


def job_status(run: Run) -> str:
    """The job's status from its run's status and steps."""
    if run.status in _RUN_STATUS:
        return _RUN_STATUS[run.status]
    return "WAITING" if any(is_waiting_step(s) for s in run.steps) else "RUNNING"


def _duration_ms(started: str | None, ended: str | None) -> int | None:
    if not started or not ended:
        return None
    delta = clock.parse_iso(ended) - clock.parse_iso(started)
    return int(delta.total_seconds() * 1000)


def _steps_by_node(run: Run) -> dict[str, list[Step]]:
    found: dict[str, list[Step]] = {}
    for step in run.steps:
        node_id = node_of(step.name)
        if node_id is not None:
            found.setdefault(node_id, []).append(step)
    return found


def _main_step(node_id: str, steps: list[Step]) -> Step:
    named = [s for s in steps if s.name == step_name(node_id)]
    return named[-1] if named else steps[-1]


ResumeUrl = Callable[[Step], str | None]


def actions(run: Run, job: JobInput, resume_url: ResumeUrl) -> list[dict[str, Any]]:
    """One action per node that ran, runs or waits, and per node skipped, in graph order."""
    plan = Plan(parse_graph(job.graph))
    by_node = _steps_by_node(run)
    mains = {n: _main_step(n, s) for n, s in by_node.items() if n in plan.incoming}
    outputs = {
        n: s.output for n, s in mains.items() if s.status == "completed" and s.name == step_name(n)
    }
    done = {n: Done(COMPLETED, v) for n, v in outputs.items()}
    skipped = set(plan.skipped(outputs))
    answer: list[dict[str, Any]] = []
    for node_id in plan.order:
        node = plan.node(node_id)
        base = {
            "nodeId": node_id,
            "moduleType": node.module_type,
            "input": plan.node_input(node_id, done),
            "trackingId": job.tracking_id,
        }
        if node_id in skipped:
            answer.append({"id": f"{run.id}:{node_id}", **base, "status": "SKIPPED", "attempt": 0})
        elif node_id in mains:
            answer.append(_action(mains[node_id], base, resume_url))
    return answer


def _action(step: Step, base: dict[str, Any], resume_url: ResumeUrl) -> dict[str, Any]:
    action: dict[str, Any] = {
        "id": step.id,
        **base,
        "status": _STEP_STATUS.get(step.status, "RUNNING"),
        "attempt": step.attempt,
    }
    if step.kind == "invoke" and step.status == "waiting":
        action["status"] = "RUNNING"  # a child job runs; this node waits for no event
    if step.started_at:
        action["startedAt"] = step.started_at
    if step.ended_at:
        action["finishedAt"] = step.ended_at
    duration = _duration_ms(step.started_at, step.ended_at)
    if duration is not None:
        action["durationMs"] = duration
    if step.status == "completed":
        if step.output_ref:
            action["outputRef"] = step.output_ref
        else:
            action["output"] = step.output
    if step.error:
        action["error"] = step.error.to_api()
    if step.kind == "callback" and step.status == "waiting":
        url = resume_url(step)
        if url:
            action["resumeUrl"] = url
    if step.child_run_id:
        # A sub-flow's child is a job; a code workflow's is a run (`GET /runs/{id}`).
        child = "childRunId" if base["moduleType"] == "workflow.invoke" else "childJobId"
        action[child] = step.child_run_id
    if step.wake_at and step.status in ("sleeping", "waiting"):
        action["wakeAt"] = step.wake_at
    return action


def job_view(run: Run, job: JobInput, resume_url: ResumeUrl) -> dict[str, Any]:
    """The job `{id, flowId, commitId, branch, status, trackingId, input, output?, error?,
    startedAt, finishedAt?, durationMs?, actions}`."""
    acts = actions(run, job, resume_url)
    body: dict[str, Any] = {
        "id": run.id,
        "flowId": job.flow_id,
        "commitId": job.commit_id,
        "branch": job.branch,
        "status": job_status(run),
        "trackingId": job.tracking_id,
        "input": job.input,
        "attempt": run.attempt,
        "startedAt": run.started_at,
    }
    if run.parent_run_id:
        body["parentJobId"] = run.parent_run_id
    if run.status == "completed":
        body["output"] = run.output
    if run.error:
        failed = next((a["nodeId"] for a in acts if a["status"] == "FAILED"), None)
        body["error"] = {**run.error.to_api(), **({"nodeId": failed} if failed else {})}
    if run.ended_at:
        body["finishedAt"] = run.ended_at
        body["durationMs"] = _duration_ms(run.started_at, run.ended_at)
    body["actions"] = acts
    return body
