"""Jobs of flows: start, read, search, cancel; failed items and their retry.

A job is a run of the interpreter workflow (`ezgh-flows` / `flow`, see
`ezgh_engine.interpreter`), so durability, retries, cancellation, history and retention are
the run's. Permissions: `flows.jobs.start|read|cancel` with the flow's name as resource.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import ddb, flows_store, payloads, runs_store
from ezgh_engine.adapters import run_control_store as control
from ezgh_engine.adapters.flows_store import FailedItem, Flow, JobEntry
from ezgh_engine.adapters.run_items import run_from, step_from
from ezgh_engine.core.flows.graph import Graph, parse_graph
from ezgh_engine.core.flows.jobs import (
    INTERPRETER_WORKFLOW,
    Actor,
    JobInput,
    is_waiting_step,
    job_input,
    job_status,
    job_summary,
)
from ezgh_engine.core.flows.modules import WAIT_MODULES
from ezgh_engine.core.models import ENDED_STATUSES, Principal, Run, Step
from ezgh_engine.errors import Conflict, Forbidden, NotFound, ValidationError
from ezgh_engine.service import callbacks, job_views, waits
from ezgh_engine.service.flow_authority import check_graph_needs
from ezgh_engine.service.flow_hosting import engine_app
from ezgh_engine.service.flows import check_branch, find_flow, require
from ezgh_engine.service.new_runs import new_run

START, READ, CANCEL = "flows.jobs.start", "flows.jobs.read", "flows.jobs.cancel"
# The most index entries one `GET /jobs` or `GET /failedItems` reads. A job listed costs
# its run item besides (one BatchGetItem per 100), and a running job whose commit has wait
# nodes a query of its wait steps.
JOBS_READ_BUDGET = 200
JOB_STATUSES = ("RUNNING", "WAITING", "COMPLETED", "FAILED", "CANCELLED")
TRACKING_MAX = 128
TRACKING_ID = re.compile(r"^[\x20-\x7e]{1,128}$")


def check_tracking(tracking_id: str | None) -> str:
    if tracking_id is None:
        return ids.new_id()
    # It travels in HTTP headers and message attributes: printable ASCII only.
    if not isinstance(tracking_id, str) or not TRACKING_ID.fullmatch(tracking_id):
        raise ValidationError(f"trackingId must be 1 to {TRACKING_MAX} printable ASCII characters")
    return tracking_id


def start_job(
    principal: Principal,
    flow_ref: str,
    *,
    input: Any,
    tracking_id: str | None = None,
    branch: str | None = None,
    job_id: str | None = None,
    via: str = "api",
) -> tuple[dict[str, Any], bool]:
    """Start a job on the branch's latest commit (default: the flow's active branch), acting
    for `principal`'s key from now on (`via`: what starts it for that key: `api`,
    `schedule:<id>`, `subscription:<id>`).

    The key must hold `flows.jobs.start` on the flow and what the commit's nodes need on the
    resources they name outright (`flow_authority`), else `403 forbidden`. `job_id`
    derived by a caller (a schedule's planned time, a queue message) makes a repeated start
    answer the first job instead of starting a second. Answers (job, created).
    """
    flow = find_flow(principal, flow_ref)
    require(principal, START, flow.name)
    branch = check_branch(branch or flow.active_branch)
    head = flows_store.branch_head(flow.id, branch)
    if head is None:
        raise Conflict(f"flow {flow.name} has no commit on branch {branch}", code="invalid_state")
    graph = parse_graph(head.graph)
    check_graph_needs(principal, graph, who="this API key")
    job = JobInput(
        flow_id=flow.id,
        commit_id=head.id,
        commit_at=head.created_at,
        branch=branch,
        input=input,
        tracking_id=check_tracking(tracking_id),
        actor=Actor(principal.key_id, via),
        flow_name=flow.name,
    )
    run_id = job_id or ids.new_id()
    existing = runs_store.get_run(run_id) if job_id else None
    if existing is None:
        run = new_run(
            run_id=run_id,
            org_id=principal.org_id,
            project_id=principal.project_id,
            app=engine_app(principal.org_id, principal.project_id),
            workflow=INTERPRETER_WORKFLOW,
            value=job.to_run_input(),
        )
        try:
            runs_store.create_run(run, now_epoch_s=int(clock.now().timestamp()))
        except runs_store.RunExists:
            existing = runs_store.get_run(run_id)
    if existing is not None:
        return view(_hydrate(existing)), False
    index_job(principal.project_id, run_id, job, graph, run.created_at)
    return view(_hydrate(run)), True


def index_job(project_id: str, job_id: str, job: JobInput, graph: Graph, created_at: str) -> None:
    """Make a job searchable (idempotent: the interpreter indexes child jobs the same way)."""
    waits = any(n.module_type in WAIT_MODULES for n in graph.nodes)
    flows_store.put_job(
        JobEntry(
            job_id,
            project_id,
            job.flow_id,
            job.commit_id,
            job.branch,
            job.tracking_id,
            created_at,
            waits=waits,
        )
    )


def _hydrate(run: Run) -> Run:
    if run.input_ref and run.input is None:
        return replace(run, input=payloads.get(run.project_id, run.id, run.input_ref))
    return run


def _resume_url(run: Run) -> Any:
    return lambda step: callbacks.url_for(run.id, step)


def job_graph(run: Run, job: JobInput) -> Any:
    """The graph of a job's commit (for showing the job: a job from before jobs named their
    commit's key shows the graph its input carried)."""
    commit = flows_store.get_commit(job.flow_id, job.commit_at, job.commit_id)
    if commit is not None:
        return commit.graph
    carried = run.input.get("graph") if isinstance(run.input, dict) else None
    return carried if isinstance(carried, dict) else {"nodes": [], "edges": []}


def view(run: Run, actions_cursor: str | None = None) -> dict[str, Any]:
    """The job of a run of the interpreter, with (a page of) its actions, within one
    answer's size (`service.job_views`)."""
    job = job_input(run)
    graph = job_graph(run, job)
    return job_views.job_answer(run, job, graph, _resume_url(run), actions_cursor=actions_cursor)


def _job_run(principal: Principal, job_id: str, *actions: str) -> tuple[Run, Flow | None]:
    """The job's run, once the key holds every one of `actions` on its flow."""
    entry = flows_store.get_job(principal.project_id, job_id)
    run = runs_store.get_run(job_id) if entry else None
    if entry is None or run is None or run.project_id != principal.project_id:
        raise NotFound(f"job {job_id} not found")
    flow = flows_store.get_flow(principal.project_id, entry.flow_id)
    for action in actions:
        if not may(principal, action, flow.name if flow else None):
            raise Forbidden(f"this API key may not {action} on job {job_id}")
    return _hydrate(run), flow


def require_some(principal: Principal, action: str) -> None:
    """403 unless the key holds `action` on at least one flow (a list then answers only the
    flows it may read): `require(…, None)` would ask for every flow."""
    if not principal.holds(action):
        raise Forbidden(f"this API key may not {action}")


def may(principal: Principal, action: str, flow_name: str | None) -> bool:
    """Whether the key holds `action` on this flow; a job of a deleted flow (no name) only
    for keys that hold it on every flow."""
    return principal.allows(action, flow_name)


def get_job(principal: Principal, job_id: str, actions_cursor: str | None = None) -> dict[str, Any]:
    """The job with the page of its actions `actions_cursor` opens (None: the first)."""
    return view(_job_run(principal, job_id, READ)[0], actions_cursor)


def get_job_payload(principal: Principal, job_id: str, path: str) -> Any:
    """A value of the job that its answer gave as a reference (`service.job_views`)."""
    run = _job_run(principal, job_id, READ)[0]
    job = job_input(run)
    return job_views.payload(run, job, job_graph(run, job), path)


def cancel_job(principal: Principal, job_id: str) -> dict[str, Any]:
    """Cancel the job's run (and its running child jobs and runs); 409 once it has ended.
    Needs `flows.jobs.cancel`, and `flows.jobs.read` for the job it answers, both checked
    before anything is written (as a run's cancel)."""
    run, _ = _job_run(principal, job_id, CANCEL, READ)
    if run.ended:
        raise Conflict(f"job {job_id} has ended ({job_status(run)})", code="invalid_state")
    control.request_cancel(run, at=clock.iso(clock.now()))
    for step in run.steps:
        if step.kind == "invoke" and step.child_run_id and step.status == "waiting":
            waits.cancel_run_quietly(step.child_run_id)
    return get_job(principal, job_id)


def search_jobs(
    principal: Principal,
    *,
    flow_ref: str | None = None,
    status: str | None = None,
    tracking_id: str | None = None,
    created_after: str | None = None,
    created_before: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Jobs newest first, filtered; (jobs, next cursor)."""
    if not 1 <= limit <= 100:
        raise ValidationError("limit must be from 1 to 100")
    if status is not None and status not in JOB_STATUSES:
        raise ValidationError(f"status must be one of {', '.join(JOB_STATUSES)}")
    filters = _flow_filter(principal, flow_ref)
    if filters is None:
        return [], None
    if tracking_id is not None:
        filters["trackingId"] = tracking_id
    names = {f.id: f.name for f in flows_store.list_flows(principal.project_id)}
    found: list[dict[str, Any]] = []
    examined = 0
    while True:
        # Unfiltered by status, every readable entry is a job of the page: read no more.
        wanted = JOBS_READ_BUDGET - examined if status else limit - len(found) + 1
        items, nxt = flows_store.scan_index(
            f"JOBS#{principal.project_id}",
            filters,
            after=created_after,
            before=created_before,
            cursor=cursor,
            page_size=max(1, min(100, wanted, JOBS_READ_BUDGET - examined)),
        )
        entries = [flows_store.job_from_item(i) for i in items]
        kept = [e for e in entries if may(principal, READ, names.get(e.flow_id))]
        runs = flows_store.run_items([e.id for e in kept])
        for item, entry in zip(items, entries, strict=True):
            examined += 1
            raw = runs.get(entry.id) if entry in kept else None
            job = _listed(entry, raw, status) if raw is not None else None
            if job is not None:
                found.append(job)
            if len(found) == limit:
                more = item is not items[-1] or nxt is not None
                return found, flows_store.cursor_at(item) if more else None
        if nxt is None:
            return found, None
        cursor = nxt
        if examined >= JOBS_READ_BUDGET:
            # A status that few jobs have answers a short page and a cursor rather than
            # reading every job of the project.
            return found, cursor


def _listed(entry: JobEntry, raw: dict[str, Any], status: str | None) -> dict[str, Any] | None:
    """The job of an index entry as `GET /jobs` lists it (no actions), from its run item
    (and, for a running job whose commit has wait nodes, its wait steps), or None when its
    status is not the one asked for."""
    run = run_from_item(raw)
    waiting = None
    if run.status not in ENDED_STATUSES and entry.waits:
        waiting = any(
            is_waiting_step(s) for s in map(step_from_item, flows_store.wait_steps(run.id))
        )
    summary = job_summary(_hydrate(run), job_input(run), waiting=bool(waiting))
    if status is not None and summary["status"] != status:
        return None
    return summary


def run_from_item(raw: dict[str, Any]) -> Run:
    return run_from(ddb.from_item(raw))


def step_from_item(raw: dict[str, Any]) -> Step:
    return step_from(ddb.from_item(raw))


def _flow_filter(principal: Principal, flow_ref: str | None) -> dict[str, str] | None:
    """The index filter of a list of one flow's records (None: no such flow, an empty
    answer), checking `flows.jobs.read` on it; without a flow, on at least one flow (each
    record is then filtered by its own flow)."""
    if flow_ref is None:
        require_some(principal, READ)
        return {}
    flow = flows_store.get_flow(principal.project_id, flow_ref)
    if flow is None:
        return None
    require(principal, READ, flow.name)
    return {"flowId": flow.id}


# --- failed items --------------------------------------------------------------------------


def failed_item_id(job_id: str, attempt: int, node_id: str) -> str:
    """`<jobId>.<attempt>.<nodeId>`: the same failure recorded twice (a repeated
    invocation) is one item, found in its job's partition (`flows_store.failed_item_key`)."""
    return f"{job_id}.{attempt}.{node_id}"


def record_failed_item(failed: FailedItem) -> None:
    flows_store.put_failed_item(failed)


def list_failed_items(
    principal: Principal,
    *,
    flow_ref: str | None = None,
    job_id: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> tuple[list[FailedItem], str | None]:
    """Failed items newest first; at most `JOBS_READ_BUDGET` entries read per request (a
    short page and a cursor when the key may read few of them)."""
    if not 1 <= limit <= 100:
        raise ValidationError("limit must be from 1 to 100")
    filters = _flow_filter(principal, flow_ref)
    if filters is None:
        return [], None
    if job_id is not None:
        filters["jobId"] = job_id
    names = {f.id: f.name for f in flows_store.list_flows(principal.project_id)}
    found: list[FailedItem] = []
    examined = 0
    while True:
        items, nxt = flows_store.scan_index(
            f"FAILEDS#{principal.project_id}",
            filters,
            after=None,
            before=None,
            cursor=cursor,
            page_size=min(100, JOBS_READ_BUDGET - examined),
        )
        for item in items:
            examined += 1
            failed = flows_store.failed_from_item(item)
            if not may(principal, READ, names.get(failed.flow_id)):
                continue  # a key limited to some flows sees only their items
            found.append(failed)
            if len(found) == limit:
                more = item is not items[-1] or nxt is not None
                return found, flows_store.cursor_at(item) if more else None
        if nxt is None:
            return found, None
        cursor = nxt
        if examined >= JOBS_READ_BUDGET:
            return found, cursor


def retry_failed_item(principal: Principal, failed_id: str) -> dict[str, Any]:
    """Resume the item's job from its node: RetryRun of the job's run, which keeps every
    completed step (so completed nodes do not run again) and the commit the job started with.
    Needs `flows.jobs.start` and what the commit's nodes need on the resources they name
    outright, and `flows.jobs.read` for the job it answers, all checked before anything is
    written (as a run's retry). The job still acts for the key that started it."""
    failed = flows_store.get_failed_item(principal.project_id, failed_id)
    if failed is None:
        raise NotFound(f"failed item {failed_id} not found")
    run, _ = _job_run(principal, failed.job_id, START, READ)
    # The job goes on acting for the key that started it; its retrier must be able to start
    # it itself (what its commit's nodes name outright included).
    job = job_input(run)
    graph = parse_graph(job_graph(run, job))
    check_graph_needs(principal, graph, who="this API key")
    if failed.retried_at:
        raise Conflict(f"failed item {failed_id} was already retried", code="invalid_state")
    if run.status not in ("failed", "timedOut"):
        raise Conflict(
            f"job {run.id} is {job_status(run)}; only a FAILED job resumes", code="invalid_state"
        )
    # The run's conditional retry goes first: of two racing retries only one moves the run.
    control.retry(run, at=clock.iso(clock.now()))
    flows_store.mark_retried(failed, clock.iso(clock.now()))
    return get_job(principal, failed.job_id)
