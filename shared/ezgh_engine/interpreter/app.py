"""The interpreter app: the workflow `flow` that runs a committed graph, node by node.

Every node runs as a task that first awaits its upstream nodes' tasks, then asks the pure
planning (`core.flows.planning`) whether it runs or is SKIPPED and with which input; so nodes
whose inputs are ready run in parallel (their steps are awaited together), and on replay the
same recorded outputs give the same decisions. A node whose step fails (after its retries)
leaves a FailedItem and fails the job, naming the node.

`ezgh dev` serves it as a push app (`ezgh_engine.interpreter.app:ezgh_flows`) and registers it
as `ezgh-flows`; in AWS it is a function of the stack (docs/flows.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ezgh_workflows import Context, NonRetryableError, PushApp, StepError, workflow

from ezgh_engine import clock
from ezgh_engine.core.flows.graph import Node, parse_graph
from ezgh_engine.core.flows.jobs import INTERPRETER_WORKFLOW, JOB_STEP, JobInput, step_name
from ezgh_engine.core.flows.planning import COMPLETED, SKIPPED, Done, Plan
from ezgh_engine.interpreter.modules import NodeCall, run_node


class NodeFailedError(Exception):
    """A node failed after its retries: the job fails with this error, naming the node."""

    def __init__(self, node: Node, cause: StepError) -> None:
        super().__init__(
            f"node {node.id} ({node.module_type}) failed: {cause.error_name}: {cause.message}"
        )
        self.node_id = node.id


def _resolve_and_index(job_id: str, given: Any) -> Any:
    """The job's full input, indexed for search. A run input that names a flow without its
    graph (`{flowId, input?, trackingId?, branch?}`: a schedule of `ezgh-flows/flow`, or a
    StartRun) is resolved here, once, to the branch's latest commit; the recorded answer keeps
    the job on that commit for good."""

    def resolve() -> Any:
        from ezgh_engine import ids
        from ezgh_engine.adapters import flows_store, runs_store
        from ezgh_engine.service.flow_jobs import index_job

        run = runs_store.get_run(job_id, with_steps=False)
        if run is None:
            raise NonRetryableError(f"job {job_id} not found")
        job = JobInput.from_run_input(given)
        if not job.commit_id:
            data = given if isinstance(given, dict) else {}
            flow = flows_store.get_flow(run.project_id, str(data.get("flowId", "")))
            if flow is None:
                raise NonRetryableError(f"flow {data.get('flowId')!r} not found")
            branch = str(data.get("branch") or flow.active_branch)
            head = flows_store.branch_head(flow.id, branch)
            if head is None:
                raise NonRetryableError(f"flow {flow.name} has no commit on branch {branch}")
            tracking = str(data.get("trackingId") or ids.new_id())
            job = JobInput(flow.id, head.id, branch, head.graph, data.get("input"), tracking)
        index_job(run.project_id, job_id, job, run.created_at)
        return job.to_run_input()

    return resolve


def _record_failure(job_id: str, attempt: int, call: NodeCall, cause: StepError) -> None:
    """Leave a FailedItem (idempotent: its ID is derived from job, attempt and node)."""
    from ezgh_engine.adapters import runs_store
    from ezgh_engine.adapters.flows_store import FailedItem
    from ezgh_engine.service.flow_jobs import failed_item_id, record_failed_item

    run = runs_store.get_run(job_id)
    if run is None:
        return
    tries = [s.attempt for s in run.steps if s.name == step_name(call.node.id)]
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
    """Run the committed graph in the run's input; the output is keyed by sink node ids."""
    resolved = await ctx.step.run(JOB_STEP, _resolve_and_index(ctx.run_id, ctx.input), retries=3)
    job = JobInput.from_run_input(resolved)
    plan = Plan(parse_graph(job.graph))
    done: dict[str, Done] = {}
    tasks: dict[str, asyncio.Future[None]] = {}

    async def node_task(node_id: str) -> None:
        upstream = [tasks[p] for p in plan.predecessors(node_id)]
        if upstream:
            await asyncio.gather(*upstream)
        if plan.decide(node_id, done) == "skip":
            done[node_id] = Done(SKIPPED)
            return
        call = NodeCall(job, ctx.run_id, plan.node(node_id), plan.node_input(node_id, done))
        try:
            output = await run_node(ctx, call)
        except StepError as err:
            _record_failure(ctx.run_id, ctx.attempt, call, err)
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
