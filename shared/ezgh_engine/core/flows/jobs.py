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

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.core.flows.graph import parse_graph
from ezgh_engine.core.flows.planning import COMPLETED, Done, Plan
from ezgh_engine.core.models import Run, Step

# The engine's interpreter app, one per project, never stored as an app record: the engine
# finds it by its derived ID (`interpreter_app_id`), which no app a user creates can have
# (theirs are random), and its name is one no user app can bear (app names are
# `^[a-z0-9-]{1,64}$`). No API call names, reads, changes or starts it (docs/flows.md).
INTERPRETER_APP = "ezgh:flows"
INTERPRETER_WORKFLOW = "flow"
_PREFIX = "node:"
WAIT_PREFIX = "wait:"
JOB_STEP = "job"  # the interpreter's first step: the job indexed and its starter checked
# `flow.invoke`: a job tree is at most this deep, and its root may have this many jobs
# below it in all (each job shares what it was given among its flow.invoke nodes).
MAX_DEPTH = 10
TREE_BUDGET = 100


def interpreter_app_id(project_id: str) -> str:
    """The ID of the project's interpreter app, derived (the runs of jobs carry it)."""
    return ids.derived_id("ezgh-flows-app", project_id)


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


def wait_step_name(node_id: str) -> str:
    """The step name of a wait node's wait (`wait:<id>`: a delay's sleep, a wait.event's
    callback or message). Its own prefix puts the items of a job's waits together in the
    run's partition, so a job's WAITING is read from them alone (`flows_store.wait_steps`)."""
    return f"{WAIT_PREFIX}{node_id}"


def node_of(name: str) -> str | None:
    """The node id a step name belongs to (None for the interpreter's own steps)."""
    for prefix in (_PREFIX, WAIT_PREFIX):
        if name.startswith(prefix):
            return name[len(prefix) :].split(":", 1)[0]
    return None


def is_main_step(name: str, node_id: str) -> bool:
    """Whether a step named `name` is node `node_id`'s own (not one of its helpers)."""
    return name in (step_name(node_id), wait_step_name(node_id))


@dataclass(frozen=True)
class Actor:
    """Whose authority a job's nodes act with: the API key that started the job (for a
    schedule or a subscription, the key that created it; for a child job, its parent's),
    and what started it (`api`, `schedule:<id>`, `subscription:<id>`, `job:<id>`). The key
    is read again, by its ID, when each node runs: a revoked or narrowed key stops its jobs
    at their next node."""

    key_id: str
    via: str

    def to_data(self) -> dict[str, str]:
        return {"keyId": self.key_id, "via": self.via}

    @classmethod
    def from_data(cls, data: Any) -> Actor | None:
        if not isinstance(data, dict):
            return None
        key_id, via = data.get("keyId"), data.get("via")
        if not isinstance(key_id, str) or not key_id or not isinstance(via, str):
            return None
        return cls(key_id, via)


@dataclass(frozen=True)
class JobInput:
    """The interpreter run's input, written by the engine alone: the flow and commit (the
    interpreter loads the commit's graph itself, never a graph from the input), the job's
    input and trackingId, whose authority it acts with, and its place in a job tree."""

    flow_id: str
    commit_id: str
    commit_at: str  # the commit's createdAt (its key in the store)
    branch: str
    input: Any
    tracking_id: str
    actor: Actor | None
    depth: int = 0
    budget: int = TREE_BUDGET
    flow_name: str = ""  # the flow's name when the job started (its flow may be deleted)

    def to_run_input(self) -> dict[str, Any]:
        return {
            "flowId": self.flow_id,
            "commitId": self.commit_id,
            "commitAt": self.commit_at,
            "branch": self.branch,
            "input": self.input,
            "trackingId": self.tracking_id,
            "actor": self.actor.to_data() if self.actor else None,
            "depth": self.depth,
            "budget": self.budget,
            "flowName": self.flow_name,
        }

    @classmethod
    def from_run_input(cls, value: Any) -> JobInput:
        data = value if isinstance(value, dict) else {}
        return cls(
            flow_id=str(data.get("flowId", "")),
            commit_id=str(data.get("commitId", "")),
            commit_at=str(data.get("commitAt", "")),
            branch=str(data.get("branch", "")),
            input=data.get("input"),
            tracking_id=str(data.get("trackingId", "")),
            actor=Actor.from_data(data.get("actor")),
            depth=_count(data.get("depth"), 0),
            budget=_count(data.get("budget"), 0),
            flow_name=str(data.get("flowName", "")),
        )


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def job_input(run: Run) -> JobInput:
    """The job's input, as the engine wrote it on its run."""
    return JobInput.from_run_input(run.input)


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
    named = [s for s in steps if is_main_step(s.name, node_id)]
    return named[-1] if named else steps[-1]


ResumeUrl = Callable[[Step], str | None]


def actions(run: Run, job: JobInput, graph: Any, resume_url: ResumeUrl) -> list[dict[str, Any]]:
    """One action per node that ran, runs or waits, and per node skipped, in graph order
    (`graph`: the job's commit's)."""
    plan = Plan(parse_graph(graph))
    by_node = _steps_by_node(run)
    mains = {n: _main_step(n, s) for n, s in by_node.items() if n in plan.incoming}
    outputs = {
        n: s.output for n, s in mains.items() if s.status == "completed" and is_main_step(s.name, n)
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


_FAILED_NODE = re.compile(r"^node (?P<node>[A-Za-z0-9_.-]{1,64}) \(")


def failed_node(run: Run) -> str | None:
    """The node a failed job's error names (the interpreter's `node <id> (<type>) failed`)."""
    match = _FAILED_NODE.match(run.error.message) if run.error else None
    return match["node"] if match else None


def job_summary(run: Run, job: JobInput, *, waiting: bool) -> dict[str, Any]:
    """The job without its actions, as `GET /jobs` lists it: `{id, flowId, commitId,
    branch, status, trackingId, input, output?, error?, startedAt, finishedAt?,
    durationMs?}`. `waiting`: whether one of its wait nodes waits (read by the caller)."""
    status = _RUN_STATUS.get(run.status) or ("WAITING" if waiting else "RUNNING")
    body: dict[str, Any] = {
        "id": run.id,
        "flowId": job.flow_id,
        "commitId": job.commit_id,
        "branch": job.branch,
        "status": status,
        "trackingId": job.tracking_id,
        "input": job.input,
        "attempt": run.attempt,
        "startedAt": run.started_at,
    }
    if run.parent_run_id:
        body["parentJobId"] = run.parent_run_id
    if run.status == "completed":
        body["output"] = run.output
        if run.output_ref:
            body["outputRef"] = run.output_ref
    if run.error:
        node = failed_node(run)
        body["error"] = {**run.error.to_api(), **({"nodeId": node} if node else {})}
    if run.ended_at:
        body["finishedAt"] = run.ended_at
        body["durationMs"] = _duration_ms(run.started_at, run.ended_at)
    return body


def job_view(run: Run, job: JobInput, graph: Any, resume_url: ResumeUrl) -> dict[str, Any]:
    """The job with its `actions` (`graph`: its commit's)."""
    body = job_summary(run, job, waiting=job_status(run) == "WAITING")
    acts = actions(run, job, graph, resume_url)
    if "error" in body and "nodeId" not in body["error"]:
        failed = next((a["nodeId"] for a in acts if a["status"] == "FAILED"), None)
        if failed:
            body["error"]["nodeId"] = failed
    body["actions"] = acts
    return body
