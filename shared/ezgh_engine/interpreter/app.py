"""The interpreter app: the workflow `flow` that runs a committed graph, node by node.

A job's run input is the engine's alone (`core.flows.jobs.JobInput`: the flow and commit,
the job's input, the key it acts for): no API call starts a run of this app. The graph is
never taken from that input: the interpreter loads the commit it names from the store (a
commit never changes, so every invocation reads the same graph) and checks it again.

Every node runs as a task that first awaits its upstream nodes' tasks, then asks the pure
planning (`core.flows.planning`) whether it runs or is SKIPPED and with which input; so nodes
whose inputs are ready run in parallel (their steps are awaited together), and on replay the
same recorded outputs give the same decisions. A node whose step fails (after its retries)
leaves a FailedItem and fails the job, naming the node.

`ezgh dev` serves it at the topology's `flows` function, as it is deployed (docs/flows.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ezgh_workflows import Context, NonRetryableError, PushApp, StepError, workflow

from ezgh_engine import clock
from ezgh_engine.core.flows.graph import Graph, Node
from ezgh_engine.core.flows.jobs import INTERPRETER_WORKFLOW, JOB_STEP, JobInput, is_main_step
from ezgh_engine.core.flows.planning import COMPLETED, SKIPPED, Done, Plan
from ezgh_engine.interpreter.modules import ENGINE_RETRIES, JobContext, NodeCall, run_node


class NodeFailedError(Exception):
    """A node failed after its retries: the job fails with this error, naming the node."""

    def __init__(self, node: Node, cause: StepError) -> None:
        super().__init__(
            f"node {node.id} ({node.module_type}) failed: {cause.error_name}: {cause.message}"
        )
        self.node_id = node.id


class JobError(NonRetryableError):
    """The job cannot run at all (its run or its commit is gone)."""


def _begin(job_id: str, job: JobInput) -> Any:
    """The job's first step: its project, read from its run, and the job indexed for
    `GET /jobs` (idempotent: a job the API started is indexed already)."""

    def begin() -> Any:
        from ezgh_engine.adapters import runs_store
        from ezgh_engine.service.flow_jobs import index_job

        run = runs_store.get_run(job_id, with_steps=False)
        if run is None:
            raise JobError(f"job {job_id} not found")
        graph = load_graph(job)
        index_job(run.project_id, job_id, job, graph, run.created_at)
        return {"orgId": run.org_id, "projectId": run.project_id}

    return begin


def load_graph(job: JobInput) -> Graph:
    """The graph of the job's commit, from the store (checked as a commit is)."""
    from ezgh_engine.adapters import flows_store
    from ezgh_engine.core.flows.validate import check_graph
    from ezgh_engine.errors import ValidationError

    commit = flows_store.get_commit(job.flow_id, job.commit_at, job.commit_id)
    if commit is None:
        raise JobError(f"commit {job.commit_id} of flow {job.flow_id} not found")
    try:
        return check_graph(commit.graph)
    except ValidationError as err:
        raise JobError(f"commit {job.commit_id}: {err.message}") from None


def _record_failure(call: NodeCall, attempt: int, cause: StepError) -> None:
    """Leave a FailedItem (idempotent: its ID is derived from job, attempt and node)."""
    from ezgh_engine.adapters import runs_store
    from ezgh_engine.adapters.flows_store import FailedItem
    from ezgh_engine.service.flow_jobs import failed_item_id, record_failed_item

    job_id = call.context.job_id
    run = runs_store.get_run(job_id)
    if run is None:
        return
    tries = [s.attempt for s in run.steps if is_main_step(s.name, call.node.id)]
    record_failed_item(
        FailedItem(
            id=failed_item_id(job_id, attempt, call.node.id),
            project_id=run.project_id,
            job_id=job_id,
            flow_id=call.job.flow_id,
            node_id=call.node.id,
            module_type=call.node.module_type,
            input=call.input,
            error={"code": cause.code, "name": cause.error_name, "message": cause.message},
            attempts=max(tries, default=1),
            created_at=clock.iso(clock.now()),
        )
    )


def _retrieve(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


@workflow(INTERPRETER_WORKFLOW)
async def flow(ctx: Context) -> Any:
    """Run the job's committed graph; the output is keyed by sink node ids."""
    job = JobInput.from_run_input(ctx.input)
    begun = await ctx.step.run(JOB_STEP, _begin(ctx.run_id, job), retries=ENGINE_RETRIES)
    plan = Plan(load_graph(job))
    invokes = sum(1 for n in plan.graph.nodes if n.module_type == "flow.invoke")
    context = JobContext(job, ctx.run_id, begun["orgId"], begun["projectId"], invokes)
    done: dict[str, Done] = {}
    tasks: dict[str, asyncio.Future[None]] = {}

    async def node_task(node_id: str) -> None:
        upstream = [tasks[p] for p in plan.predecessors(node_id)]
        if upstream:
            await asyncio.gather(*upstream)
        if plan.decide(node_id, done) == "skip":
            done[node_id] = Done(SKIPPED)
            return
        call = NodeCall(context, plan.node(node_id), plan.node_input(node_id, done))
        try:
            output = await run_node(ctx, call)
        except StepError as err:
            _record_failure(call, ctx.attempt, err)
            raise NodeFailedError(call.node, err) from None
        done[node_id] = Done(COMPLETED, output)

    for node_id in plan.order:  # graph order: upstream tasks exist before their dependents
        tasks[node_id] = asyncio.ensure_future(node_task(node_id))
        # After a failure the job ends at once; its other nodes' errors are read here so
        # they are not logged as never retrieved.
        tasks[node_id].add_done_callback(_retrieve)
    await asyncio.gather(*tasks.values())
    return plan.job_output(done)


ezgh_flows = PushApp([flow])
