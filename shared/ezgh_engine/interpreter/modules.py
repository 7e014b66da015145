"""What each module type does when its node runs, as steps of the interpreter's run.

Every node's main step is named `node:<nodeId>` (`core.flows.jobs.step_name`); its config is
rendered with JMESPath over `{input, in, trackingId}` inside the step where that can fail, so a
bad template fails the node (and leaves a failed item) rather than the interpreter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from ezgh_workflows import Context, NonRetryableError, step_context

from ezgh_engine import clock
from ezgh_engine.core.flows.graph import Node
from ezgh_engine.core.flows.jobs import JobInput, step_name
from ezgh_engine.core.flows.planning import pure_output
from ezgh_engine.core.flows.templating import TemplateError, render, scope
from ezgh_engine.core.models import Principal

HTTP_RETRIES = 3
HTTP_TIMEOUT_SECONDS = 30


class ModuleError(NonRetryableError):
    """A node's module refused its input or config (no retry helps)."""


class HttpServerError(Exception):
    """A 5xx answer: retried with the step's retries."""


class HttpClientError(NonRetryableError):
    """A 4xx answer other than 429: the node fails."""


@dataclass(frozen=True)
class NodeCall:
    """A node about to run: its job, its input and where its expressions look."""

    job: JobInput
    job_id: str
    node: Node
    input: dict[str, Any]

    @property
    def scope(self) -> dict[str, Any]:
        return scope(self.job.input, self.input, self.job.tracking_id)

    def config(self) -> dict[str, Any]:
        """The node's config with its templates rendered; ModuleError on a bad template."""
        try:
            rendered = render(self.node.config, self.scope)
        except TemplateError as err:
            raise ModuleError(str(err)) from None
        return rendered if isinstance(rendered, dict) else {}


def _pure(call: NodeCall) -> Callable[[], Any]:
    def compute() -> Any:
        try:
            return pure_output(call.node, call.scope)
        except TemplateError as err:
            raise ModuleError(str(err)) from None

    return compute


def _project(job_id: str) -> Principal:
    """The engine acting for the job, inside the job's own project."""
    from ezgh_engine.adapters import runs_store

    run = runs_store.get_run(job_id, with_steps=False)
    if run is None:
        raise ModuleError(f"job {job_id} not found")
    return Principal(run.org_id, run.project_id, f"flows-interpreter:{job_id}", (("*", None),))


# --- http.request --------------------------------------------------------------------------


def _request(call: NodeCall) -> Callable[[], Any]:
    def send() -> Any:
        from ezgh_engine.adapters.push import check_app_url
        from ezgh_engine.errors import ValidationError

        config = call.config()
        url = str(config.get("url", ""))
        try:
            check_app_url(url)  # the push apps' rules: no metadata, no private hosts deployed
        except ValidationError as err:
            raise ModuleError(f"http.request {url!r}: {err.message}") from None
        headers = {str(k): str(v) for k, v in (config.get("headers") or {}).items()}
        headers["X-Tracking-Id"] = call.job.tracking_id
        # The same on every attempt of this node: a receiver can drop a repeated request.
        headers.setdefault("Idempotency-Key", step_context().idempotency_key)
        body = config.get("body")
        kwargs: dict[str, Any] = {"headers": headers}
        if isinstance(body, dict | list | int | float | bool):
            kwargs["json"] = body
        elif body is not None:
            kwargs["content"] = str(body)
        timeout = float(config.get("timeoutSeconds") or HTTP_TIMEOUT_SECONDS)
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            answer = client.request(str(config.get("method") or "GET"), url, **kwargs)
        if answer.status_code >= 500 or answer.status_code == 429:
            raise HttpServerError(f"{answer.status_code} from {url}")
        if answer.status_code >= 400:
            raise HttpClientError(f"{answer.status_code} from {url}: {answer.text[:300]}")
        return {
            "status": answer.status_code,
            "headers": dict(answer.headers),
            "body": _body(answer),
        }

    return send


def _body(answer: httpx.Response) -> Any:
    if "json" in answer.headers.get("content-type", ""):
        try:
            return answer.json()
        except ValueError:
            pass
    return answer.text


# --- queue.send ----------------------------------------------------------------------------


def _queue_send(call: NodeCall) -> Callable[[], Any]:
    def send() -> Any:
        from ezgh_engine.api.idempotency import answer_once
        from ezgh_engine.errors import EngineError
        from ezgh_engine.service import queues

        config = call.config()
        principal = _project(call.job_id)
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


def _resolve_flow(call: NodeCall) -> Callable[[], Any]:
    def resolve() -> Any:
        from ezgh_engine.adapters import flows_store

        config = call.config()
        principal = _project(call.job_id)
        flow = flows_store.get_flow(principal.project_id, str(config.get("flowId")))
        if flow is None:
            raise ModuleError(f"flow.invoke: flow {config.get('flowId')} not found")
        head = flows_store.branch_head(flow.id, flow.active_branch)
        if head is None:
            raise ModuleError(
                f"flow.invoke: flow {flow.name} has no commit on {flow.active_branch}"
            )
        child_input = config.get("input", call.input)
        return JobInput(
            flow.id, head.id, head.branch, head.graph, child_input, call.job.tracking_id
        ).to_run_input()

    return resolve


def _resolve_app(call: NodeCall) -> Callable[[], Any]:
    def resolve() -> Any:
        from ezgh_engine.adapters import registry_store

        config = call.config()
        principal = _project(call.job_id)
        app = registry_store.get_app(principal.project_id, str(config.get("appId")))
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
    target = await ctx.step.run(f"{name}:resolve", _resolve_app(call), retries=3)
    return await ctx.step.invoke(
        name, workflow=target["workflow"], input=target["input"], app=target["appId"]
    )


# --- dispatch ------------------------------------------------------------------------------


async def run_node(ctx: Context, call: NodeCall) -> Any:
    """Run one node as its steps; its output (a `StepError` when the node failed)."""
    node, name = call.node, step_name(call.node.id)
    kind = node.module_type
    if kind in ("trigger.manual", "transform", "condition"):
        return await ctx.step.run(name, _pure(call), retries=0)
    if kind == "http.request":
        retries = node.config.get("retries", HTTP_RETRIES)
        return await ctx.step.run(name, _request(call), retries=int(retries))
    if kind == "queue.send":
        return await ctx.step.run(name, _queue_send(call), retries=3)
    if kind == "flow.invoke":
        child = await ctx.step.run(f"{name}:resolve", _resolve_flow(call), retries=3)
        return await ctx.step.invoke(name, workflow="flow", input=child)
    if kind == "workflow.invoke":
        return await invoke_workflow(ctx, call)
    config = call.config()  # the waits are decided here, from recorded values only
    if kind == "delay":
        if config.get("until") is not None:
            await ctx.step.sleep_until(name, clock.parse_iso(str(config["until"])))
        else:
            await ctx.step.sleep(name, float(config.get("seconds") or 0))
        return None
    if kind == "wait.event":
        timeout = float(config["timeoutSeconds"])
        if config.get("queueId") is not None:
            return await ctx.step.wait_for_message(
                name,
                queue_id=str(config["queueId"]),
                key=str(config["key"]),
                timeout_seconds=timeout,
            )
        callback = await ctx.step.create_callback(name, timeout_seconds=timeout)
        return await callback.wait()
    raise ModuleError(f"module type {kind} cannot run")
