"""The interpreter app: the workflow `flow` that runs a committed graph, node by node.

Every node runs as a task that first awaits its upstream nodes' tasks, then asks the pure
planning (`core.flows.planning`) whether it runs or is SKIPPED and with which input; so nodes
whose inputs are ready run in parallel (their steps are awaited together), and on replay the
same recorded outputs give the same decisions. A node whose step fails (after its retries)
leaves a FailedItem and fails the job, naming the node.

Serve it as any push app: `ezgh dev --app ezgh_engine.interpreter.app:ezgh_flows` registers it
as `ezgh-flows`; in AWS it is a function of the stack (docs/flows.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ezgh_workflows import Context, PushApp, StepError, workflow

from ezgh_engine import clock
from ezgh_engine.core.flows.graph import Node, parse_graph
from ezgh_engine.core.flows.jobs import INTERPRETER_WORKFLOW, JobInput, step_name
from ezgh_engine.core.flows.planning import COMPLETED, SKIPPED, Done, Plan
from ezgh_engine.interpreter.modules import NodeCall, run_node


class NodeFailedError(Exception):
    """A node failed after its retries: the job fails with this error, naming the node."""

    def __init__(self, node: Node, cause: StepError) -> None:
        super().__init__(
            f"node {node.id} ({node.module_type}) failed: {cause.error_name}: {cause.message}"
        )
        self.node_id = node.id


def _index_self(job_id: str, job: JobInput) -> Any:
    """Index this job (a child job is started by the engine, not by the API)."""

    def index() -> Any:
        from ezgh_engine.adapters import runs_store
        from ezgh_engine.service.flow_jobs import index_job

        run = runs_store.get_run(job_id, with_steps=False)
        if run is not None:
            index_job(run.project_id, job_id, job, run.created_at)
        return None

    return index


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


@workflow(INTERPRETER_WORKFLOW)
async def flow(ctx: Context) -> Any:
    """Run the committed graph in the run's input; the output is keyed by sink node ids."""
    job = JobInput.from_run_input(ctx.input)
    plan = Plan(parse_graph(job.graph))
    await ctx.step.run("job", _index_self(ctx.run_id, job), retries=3)
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
    await asyncio.gather(*tasks.values())
    return plan.job_output(done)


ezgh_flows = PushApp([flow])
