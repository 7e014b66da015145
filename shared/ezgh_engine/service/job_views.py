"""Jobs as the API answers them, each answer within Lambda's 6 MB (`core.answers`), as runs
are (`service.run_views`).

- GetJob: the job and its actions, values inline while they fit, in order (the job's input,
  its output, then each action's input and output); the others as references, read with
  `GET /jobs/{jobId}/payloads/{path}`: the job's `inputRef: "input"` and
  `outputRef: "output"`, an action's `inputRef: "actions/<nodeId>/input"` and `outputRef`
  (its step's output path). An action whose input holds an upstream node's output stored
  outside the run always gives its input as a reference: GetJob reads no payload but the
  job's own input. When the actions' records alone do not fit, the answer holds the first
  ones and `nextActionsCursor`; `GET /jobs/{jobId}?actionsCursor=…` answers the job with the
  next ones (a commit's graph never changes, so the order of its actions is fixed).
- `payload`: one of those values, whole.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from ezgh_engine.adapters import ddb, payloads
from ezgh_engine.core import answers
from ezgh_engine.core.flows.graph import parse_graph
from ezgh_engine.core.flows.jobs import (
    JobInput,
    ResumeUrl,
    is_main_step,
    job_view,
    node_of,
)
from ezgh_engine.core.flows.planning import COMPLETED, Done, Plan
from ezgh_engine.core.models import Run, Step
from ezgh_engine.errors import NotFound, ValidationError

NEXT_ACTIONS = "nextActionsCursor"
_ACTIONS_PREFIX = "actions/"
_INPUT_SUFFIX = "/input"


def action_input_path(node_id: str) -> str:
    """The payload path of an action's input (the node ID percent-encoded)."""
    return f"{_ACTIONS_PREFIX}{quote(node_id, safe='')}{_INPUT_SUFFIX}"


def _scope(job_id: str) -> str:
    return f"job-actions:{job_id}"


def _main_steps(run: Run) -> dict[str, Step]:
    """Each node's own step (an action's), by node ID."""
    found: dict[str, Step] = {}
    for step in run.steps:
        node_id = node_of(step.name)
        if node_id is not None and is_main_step(step.name, node_id):
            found[node_id] = step
    return found


def job_answer(
    run: Run,
    job: JobInput,
    graph: Any,
    resume_url: ResumeUrl,
    *,
    actions_cursor: str | None = None,
) -> dict[str, Any]:
    """GetJob's answer: the job (its input read already) with the page of its actions that
    `actions_cursor` opens (None: the first)."""
    body = job_view(run, job, graph, resume_url)
    if run.output_ref:  # the job's output is stored outside the run: a reference only
        body.pop("output", None)
        body["outputRef"] = payloads.RUN_OUTPUT_PATH
    acts = _after(run.id, body.pop("actions"), actions_cursor)
    _refer_stored_inputs(run, graph, acts)
    slots = [answers.Slot(body, "input", "inputRef", payloads.RUN_INPUT_PATH)]
    if "output" in body:
        slots.append(answers.Slot(body, "output", "outputRef", payloads.RUN_OUTPUT_PATH))
    head = {k: v for k, v in body.items() if k not in ("input", "output")}
    head.update({s.ref_key: s.ref for s in slots})
    room = answers.ANSWER_BYTES - answers.size({**head, "actions": [], NEXT_ACTIONS: "c" * 512})
    records = [_without_values(a) for a in acts]
    count = answers.fitting_count(records, room)
    body["actions"] = acts[:count]
    if count < len(acts):
        last = {"nodeId": {"S": str(acts[count - 1]["nodeId"])}}
        body[NEXT_ACTIONS] = ddb.encode_cursor(last, scope=_scope(run.id))
    answers.fit_values(body, [*slots, *(s for a in body["actions"] for s in _action_slots(a))])
    return body


def _after(job_id: str, acts: list[dict[str, Any]], cursor: str | None) -> list[dict[str, Any]]:
    """The actions after the one a cursor names (in the graph's order)."""
    if not cursor:
        return acts
    key = ddb.decode_cursor(cursor, scope=_scope(job_id))
    try:
        last = str(key["nodeId"]["S"])
    except (KeyError, TypeError):
        raise ValidationError(
            "actionsCursor is not valid: pass this job's nextActionsCursor"
        ) from None
    ids = [str(a["nodeId"]) for a in acts]
    return acts[ids.index(last) + 1 :] if last in ids else []


def _refer_stored_inputs(run: Run, graph: Any, acts: list[dict[str, Any]]) -> None:
    """An action whose input holds an output stored outside the run gives it as a
    reference (GetJob does not read those payloads)."""
    stored = {n for n, step in _main_steps(run).items() if step.output_ref}
    if not stored:
        return
    plan = Plan(parse_graph(graph))
    for action in acts:
        node_id = str(action["nodeId"])
        if any(e.source in stored for e in plan.incoming.get(node_id, ())):
            action.pop("input", None)
            action["inputRef"] = action_input_path(node_id)


def _action_slots(action: dict[str, Any]) -> list[answers.Slot]:
    slots = []
    if "input" in action:
        path = action_input_path(str(action["nodeId"]))
        slots.append(answers.Slot(action, "input", "inputRef", path))
    if "output" in action:
        path = payloads.step_output_path(str(action["id"]))
        slots.append(answers.Slot(action, "output", "outputRef", path))
    return slots


def _without_values(action: dict[str, Any]) -> dict[str, Any]:
    """An action's record with its values as references (what it takes at least)."""
    record = {k: v for k, v in action.items() if k not in ("input", "output")}
    return {**record, "inputRef": "i" * 300, "outputRef": "o" * 300}


# --- payloads --------------------------------------------------------------------------------


def payload(run: Run, job: JobInput, graph: Any, path: str) -> Any:
    """A value of the job a reference names: `input`, `output`, `actions/<nodeId>/input`
    or `steps/<stepId>/output` (an action's output); 404 for anything else."""
    path = path.strip("/")
    if path == payloads.RUN_INPUT_PATH:
        return job.input
    if path == payloads.RUN_OUTPUT_PATH and run.status == "completed":
        if run.output_ref:
            return payloads.get(run.project_id, run.id, run.output_ref)
        return run.output
    mains = _main_steps(run)
    if path.startswith(_ACTIONS_PREFIX) and path.endswith(_INPUT_SUFFIX):
        node_id = unquote(path[len(_ACTIONS_PREFIX) : -len(_INPUT_SUFFIX)])
        plan = Plan(parse_graph(graph))
        if node_id in plan.incoming:
            return plan.node_input(node_id, _upstream(run, plan, mains, node_id))
    for step in mains.values():  # an action's output: the path its outputRef names
        if step.status == "completed" and path in (
            step.output_ref,
            payloads.step_output_path(step.id),
        ):
            return _output(run, step)
    raise NotFound(f"no payload {path!r} for job {run.id}")


def _upstream(run: Run, plan: Plan, mains: dict[str, Step], node_id: str) -> dict[str, Done]:
    """What the node's input is built from: its predecessors that completed, with their
    outputs read whole."""
    sources = {e.source for e in plan.incoming[node_id]}
    return {
        n: Done(COMPLETED, _output(run, step))
        for n, step in mains.items()
        if n in sources and step.status == "completed"
    }


def _output(run: Run, step: Step) -> Any:
    if step.output_ref:
        return payloads.get(run.project_id, run.id, step.output_ref)
    return step.output
