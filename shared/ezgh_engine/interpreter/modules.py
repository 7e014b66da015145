"""What each module type does when its node runs, as steps of the interpreter's run.

Every node's main step is named `node:<nodeId>` (a wait node's wait `wait:<nodeId>`,
`core.flows.jobs`); helper steps are `node:<nodeId>:<part>`. Inside its first step, before
anything else, a node checks the job's authority (`service.flow_authority`: the key the
job acts for, read again now) and has the sandbox (`adapters.sandbox`) render its config:
so a revoked or narrowed key fails the node with `403 forbidden` before it acts, and a
user's expression or URL never runs in this function, which holds the token secret and
reads the registry. A bad template fails the node (and leaves a failed item), never the
interpreter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ezgh_workflows import Context, NonRetryableError, step_context

from ezgh_engine import clock
from ezgh_engine.core.flows.graph import Node
from ezgh_engine.core.flows.jobs import (
    INTERPRETER_WORKFLOW,
    MAX_DEPTH,
    Actor,
    JobInput,
    step_name,
    wait_step_name,
)
from ezgh_engine.core.flows.templating import scope
from ezgh_engine.core.models import Principal

HTTP_RETRIES = 3
ENGINE_RETRIES = 3  # a step whose only failures are the engine's (the sandbox, a table)


class ModuleError(NonRetryableError):
    """A node's module refused its input or config (no retry helps)."""


class ForbiddenError(NonRetryableError):
    """403 forbidden: the key the job acts for may not do what the node does (no more)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"403 forbidden: {message}")


class HttpServerError(Exception):
    """A 5xx or 429 answer, or a network error: retried with the step's retries."""


class HttpClientError(NonRetryableError):
    """A 4xx answer other than 429: the node fails."""


@dataclass(frozen=True)
class JobContext:
    """The job a node belongs to: its input as the engine wrote it, and its project (read
    from its run once, in the job's first step)."""

    job: JobInput
    job_id: str
    org_id: str
    project_id: str
    invokes: int  # the job's flow.invoke nodes: they share its tree budget


@dataclass(frozen=True)
class NodeCall:
    """A node about to run: its job, its input and where its expressions look."""

    context: JobContext
    node: Node
    input: dict[str, Any]

    @property
    def job(self) -> JobInput:
        return self.context.job

    @property
    def scope(self) -> dict[str, Any]:
        return scope(self.job.input, self.input, self.job.tracking_id)


# --- authority and the sandbox ---------------------------------------------------------------


def _sandbox(request: dict[str, Any]) -> Any:
    """The sandbox's answer to `request`: its value, or the error it maps to."""
    from ezgh_engine.adapters import sandbox
    from ezgh_engine.errors import PayloadTooLarge

    try:
        answer = sandbox.call(request)
    except PayloadTooLarge as err:
        raise ModuleError(err.message) from None
    if "ok" in answer:
        return answer["ok"]
    error = answer.get("error") or {}
    kind, message = error.get("kind"), str(error.get("message") or "the sandbox failed")
    if kind == "server":
        raise HttpServerError(message)
    if kind == "client":
        raise HttpClientError(message)
    raise ModuleError(message)


def rendered_config(call: NodeCall) -> dict[str, Any]:
    """The node's config with its templates rendered (by the sandbox)."""
    if not call.node.config:
        return {}
    value = _sandbox({"op": "render", "config": call.node.config, "scope": call.scope})
    return value if isinstance(value, dict) else {}


def authorize(call: NodeCall, config: dict[str, Any] | None = None) -> Principal:
    """The key the job acts for, as it is now, once it may still run the job and (with the
    rendered `config`) do what this node does; `ForbiddenError` (403) otherwise, and
    `ModuleError` for a resource the config names that does not exist."""
    from ezgh_engine.errors import Forbidden
    from ezgh_engine.service import flow_authority as authority

    context = call.context
    try:
        principal = authority.acting_principal(context.project_id, call.job.actor)
        authority.require_job_start(principal, call.job.flow_id, call.job.flow_name)
        if config is not None:
            authority.require_node(principal, call.node, config)
    except Forbidden as err:
        raise ForbiddenError(err.message) from None
    except authority.Unresolved as err:
        raise ModuleError(f"{call.node.module_type}: {err}") from None
    return principal


def _pure(call: NodeCall) -> Callable[[], Any]:
    def compute() -> Any:
        authorize(call)
        if call.node.module_type == "trigger.manual":
            return call.job.input
        node = {"id": call.node.id, "moduleType": call.node.module_type, "config": call.node.config}
        return _sandbox({"op": "pure", "node": node, "scope": call.scope})

    return compute


def _request(call: NodeCall) -> Callable[[], Any]:
    def send() -> Any:
        authorize(call)  # a URL needs no grant; the job must still be its key's to run
        return _sandbox(
            {
                "op": "http",
                "config": call.node.config,
                "scope": call.scope,
                "trackingId": call.job.tracking_id,
                # The same on every attempt of this node: a receiver can drop a repeat.
                "idempotencyKey": step_context().idempotency_key,
            }
        )

    return send


def _checked_config(call: NodeCall) -> Callable[[], Any]:
    """A wait node's config, rendered and authorized, recorded before it waits: its wait is
    then decided from recorded values only."""

    def check() -> Any:
        config = rendered_config(call)
        authorize(call, config)
        return config

    return check


# --- queue.send ----------------------------------------------------------------------------


def _queue_send(call: NodeCall) -> Callable[[], Any]:
    def send() -> Any:
        from ezgh_engine.api.idempotency import answer_once
        from ezgh_engine.errors import EngineError
        from ezgh_engine.service import queues

        config = rendered_config(call)
        principal = authorize(call, config)
        messages = []
        for message in config.get("messages") or []:
            message = dict(message) if isinstance(message, dict) else {"body": message}
            attributes = {**(message.get("attributes") or {}), "trackingId": call.job.tracking_id}
            messages.append({**message, "attributes": attributes})
        digest = step_context().idempotency_key
        try:
            queue = queues.get_queue(principal, str(config.get("queueId")))
            # The same `wfq_` key as `send_to_queue`: a resent step answers the first send.
            answer = answer_once(
                principal,
                f"POST /queues/{queue.id}/messages",
                f"wfq_{digest}",
                {"messages": messages},
                lambda: (200, {"messages": queues.send(queue, messages)}),
            )
        except EngineError as err:
            if err.status < 500:
                raise ModuleError(f"queue.send: {err.code}: {err.message}") from None
            raise
        body = answer.body  # the recorded answer, or a replay of the first one
        return json.loads(body) if isinstance(body, str | bytes) else body

    return send


# --- flow.invoke and workflow.invoke ---------------------------------------------------------


def child_budget(budget: int, invokes: int) -> int:
    """What each of a job's `invokes` flow.invoke nodes hands its child job of the job's
    tree budget: together, never more than the job was given (so a tree never exceeds
    `TREE_BUDGET` jobs however it recurses)."""
    return (budget - invokes) // max(invokes, 1)


def _resolve_flow(call: NodeCall) -> Callable[[], Any]:
    def resolve() -> Any:
        from ezgh_engine.adapters import flows_store

        config = rendered_config(call)
        authorize(call, config)
        job = call.job
        if job.depth + 1 > MAX_DEPTH:
            raise ModuleError(f"flow.invoke: a job tree is at most {MAX_DEPTH} jobs deep")
        budget = child_budget(job.budget, call.context.invokes)
        if budget < 0:
            raise ModuleError(
                "flow.invoke: this job's tree may start no more jobs (a root job's tree holds "
                "at most 100 jobs)"
            )
        flow = flows_store.get_flow(call.context.project_id, str(config.get("flowId")))
        if flow is None:
            raise ModuleError(f"flow.invoke: flow {config.get('flowId')} not found")
        head = flows_store.branch_head(flow.id, flow.active_branch)
        if head is None:
            raise ModuleError(
                f"flow.invoke: flow {flow.name} has no commit on {flow.active_branch}"
            )
        actor = Actor(job.actor.key_id, f"job:{call.context.job_id}") if job.actor else None
        child = JobInput(
            flow_id=flow.id,
            commit_id=head.id,
            commit_at=head.created_at,
            branch=head.branch,
            input=config.get("input", call.input),
            tracking_id=job.tracking_id,
            actor=actor,
            depth=job.depth + 1,
            budget=budget,
            flow_name=flow.name,
        )
        return child.to_run_input()

    return resolve


def _resolve_app(call: NodeCall) -> Callable[[], Any]:
    def resolve() -> Any:
        from ezgh_engine.adapters import registry_store

        config = rendered_config(call)
        authorize(call, config)
        app = registry_store.get_app(call.context.project_id, str(config.get("appId")))
        workflow = str(config.get("workflow"))
        if app is None or app.status != "synced" or workflow not in app.workflows:
            raise ModuleError(
                f"workflow.invoke: no synced app {config.get('appId')} with {workflow}"
            )
        value = config.get("input", call.input)
        if isinstance(value, dict):
            value = {**value, "trackingId": call.job.tracking_id}
        return {"appId": app.id, "workflow": workflow, "input": value}

    return resolve


async def invoke_workflow(ctx: Context, call: NodeCall) -> Any:
    """A code workflow of another app of the job's project as the engine's child run (an
    `invoke` step naming the app): the job waits without polling, its cancel cancels the
    child, and the child's end resumes the job. The app and workflow are checked once, in a
    recorded step, so a replay invokes the same one."""
    name = step_name(call.node.id)
    target = await ctx.step.run(f"{name}:resolve", _resolve_app(call), retries=ENGINE_RETRIES)
    return await ctx.step.invoke(
        name, workflow=target["workflow"], input=target["input"], app=target["appId"]
    )


async def _wait(ctx: Context, call: NodeCall) -> Any:
    """A delay or a wait.event: its config checked in a recorded step, then its wait."""
    node, name = call.node, wait_step_name(call.node.id)
    config = await ctx.step.run(
        step_name(node.id, "config"), _checked_config(call), retries=ENGINE_RETRIES
    )
    if node.module_type == "delay":
        if config.get("until") is not None:
            await ctx.step.sleep_until(name, clock.parse_iso(str(config["until"])))
        else:
            await ctx.step.sleep(name, float(config.get("seconds") or 0))
        return None
    timeout = float(config["timeoutSeconds"])
    if config.get("queueId") is not None:
        return await ctx.step.wait_for_message(
            name, queue_id=str(config["queueId"]), key=str(config["key"]), timeout_seconds=timeout
        )
    callback = await ctx.step.create_callback(name, timeout_seconds=timeout)
    return await callback.wait()


# --- dispatch ------------------------------------------------------------------------------


async def run_node(ctx: Context, call: NodeCall) -> Any:
    """Run one node as its steps; its output (a `StepError` when the node failed)."""
    node, name = call.node, step_name(call.node.id)
    kind = node.module_type
    if kind in ("trigger.manual", "transform", "condition"):
        return await ctx.step.run(name, _pure(call), retries=ENGINE_RETRIES)
    if kind == "http.request":
        retries = node.config.get("retries", HTTP_RETRIES)  # a literal (`validate`)
        retries = retries if isinstance(retries, int) else HTTP_RETRIES
        return await ctx.step.run(name, _request(call), retries=retries)
    if kind == "queue.send":
        return await ctx.step.run(name, _queue_send(call), retries=ENGINE_RETRIES)
    if kind == "flow.invoke":
        resolve = _resolve_flow(call)
        child = await ctx.step.run(f"{name}:resolve", resolve, retries=ENGINE_RETRIES)
        return await ctx.step.invoke(name, workflow=INTERPRETER_WORKFLOW, input=child)
    if kind == "workflow.invoke":
        return await invoke_workflow(ctx, call)
    if kind in ("delay", "wait.event"):
        return await _wait(ctx, call)
    raise ModuleError(f"module type {kind} cannot run")
