"""Whose authority a flow's nodes act with, and what each node needs of it.

A job acts for the API key that started it (for a schedule or a subscription, the key that
created it; a child job, for its parent's key): `core.flows.jobs.Actor`. Nothing a node does
goes beyond what that key may do itself, checked three times:

- **at commit**, against the committing key: every resource a node names outright (not
  through a template) must exist and the key must hold what the node needs on it, else
  `403 forbidden` (`400 validation_error` for a name that is no resource);
- **at start** (the API, a schedule's fire, a subscription's delivery), against the
  starting key: `flows.jobs.start` on the flow and the same needs of the commit it runs;
- **when each node runs**, against the key as it is then (read again by its ID): it must
  still exist, still hold `flows.jobs.start` on the job's flow, and hold what the node
  needs on the resources its rendered config names. A revoked or narrowed key fails the
  node with `403 forbidden` and the node never acts.

What a node needs (`node_needs`), as the same call through the API would:

| moduleType | needs |
| --- | --- |
| `workflow.invoke` | `workflows.runs.start` on `<app name>/<workflow>` |
| `queue.send` | `queues.messages.send` on the queue |
| `flow.invoke` | `flows.jobs.start` on the flow |
| `wait.event` with a queue | `queues.subscriptions.create` on the queue (as a resume subscription's creator) |
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ezgh_engine.adapters import api_keys_store, flows_store, registry_store
from ezgh_engine.core.flows.graph import Graph, Node
from ezgh_engine.core.flows.jobs import Actor
from ezgh_engine.core.models import Principal
from ezgh_engine.errors import Forbidden, NotFound, ValidationError
from ezgh_engine.service import queues

START_JOBS = "flows.jobs.start"


@dataclass(frozen=True)
class Need:
    """An action a node needs on one resource; `what` names the resource for a message."""

    action: str
    resource: str
    what: str


class Unresolved(Exception):
    """A node names a resource that does not exist (or may not be named)."""


def _static(value: Any) -> str | None:
    """The text of a config value that names its resource outright (None: a template, or
    nothing: known only when the node runs)."""
    if isinstance(value, str) and value and "{{" not in value:
        return value
    return None


def _queue_need(project_id: str, ref: str, action: str) -> Need:
    try:
        queue = queues.find_queue(project_id, ref)
    except (NotFound, ValidationError) as err:
        raise Unresolved(f"queue {ref}: {err.message}") from None
    return Need(action, queue.id, f"queue {queue.id}")


def _needs_of(project_id: str, node: Node, config: dict[str, Any]) -> Iterator[Need]:
    kind = node.module_type
    if kind == "workflow.invoke":
        app_ref, workflow = _static(config.get("appId")), _static(config.get("workflow"))
        if app_ref is not None and workflow is not None:
            app = registry_store.get_app(project_id, app_ref)
            if app is None:
                raise Unresolved(f"app {app_ref} not found")
            if app.status == "synced" and workflow not in app.workflows:
                raise Unresolved(f"workflow {workflow} not found in app {app.name}")
            resource = f"{app.name}/{workflow}"
            yield Need("workflows.runs.start", resource, f"workflow {resource}")
    elif kind == "queue.send":
        ref = _static(config.get("queueId"))
        if ref is not None:
            yield _queue_need(project_id, ref, "queues.messages.send")
    elif kind == "flow.invoke":
        ref = _static(config.get("flowId"))
        if ref is not None:
            flow = flows_store.get_flow(project_id, ref)
            if flow is None:
                raise Unresolved(f"flow {ref} not found")
            yield Need(START_JOBS, flow.name, f"flow {flow.name}")
    elif kind == "wait.event":
        ref = _static(config.get("queueId"))
        if ref is not None:
            yield _queue_need(project_id, ref, "queues.subscriptions.create")


def node_needs(project_id: str, node: Node, config: dict[str, Any]) -> list[Need]:
    """What `node` needs for the resources `config` names outright (a rendered config names
    them all); `Unresolved` for one that does not exist."""
    return list(_needs_of(project_id, node, config))


def _missing(principal: Principal, needs: list[Need]) -> Need | None:
    return next((n for n in needs if not principal.allows(n.action, n.resource)), None)


def check_graph_needs(principal: Principal, graph: Graph, *, who: str) -> None:
    """Every resource the graph's nodes name outright exists (else 400 naming the node) and
    `principal` holds what the node needs on it (else 403 naming the node)."""
    for node in graph.executable().nodes:
        try:
            needs = node_needs(principal.project_id, node, node.config)
        except Unresolved as err:
            raise ValidationError(f"node {node.id}: {err}") from None
        missing = _missing(principal, needs)
        if missing is not None:
            raise Forbidden(
                f"node {node.id} ({node.module_type}): {who} may not {missing.action} on "
                f"{missing.what}"
            )


def acting_principal(project_id: str, actor: Actor | None, *, cached: bool = False) -> Principal:
    """The key a job acts for, as it is now; 403 when the job records none or the key is
    revoked. `cached`: as this environment read it up to `api_keys_store.KEY_CACHE_SECONDS`
    ago (a schedule's fire, a subscription's delivery: `service.acting_keys`)."""
    if actor is None:  # a job, schedule or subscription made before the engine recorded one
        raise Forbidden(
            "no API key to act for is recorded (made before the engine recorded one: start, "
            "schedule or subscribe it again)"
        )
    read = api_keys_store.get_api_key_cached if cached else api_keys_store.get_api_key
    key = read(project_id, actor.key_id)
    if key is None:
        raise Forbidden(f"the API key {actor.key_id} this job acts for ({actor.via}) is revoked")
    return key.principal()


def require_job_start(principal: Principal, flow_id: str, recorded_name: str) -> None:
    """403 unless the key may still start jobs of the job's flow (by its name now, or the
    name it had when the job started if it was deleted since)."""
    flow = flows_store.get_flow_by_id(principal.project_id, flow_id)
    name = flow.name if flow is not None else recorded_name
    if not principal.allows(START_JOBS, name):
        raise Forbidden(f"the API key this job acts for may no longer {START_JOBS} on flow {name}")


def require_node(principal: Principal, node: Node, config: dict[str, Any]) -> None:
    """403 unless the key holds what `node` needs on the resources its rendered `config`
    names; `Unresolved` for a resource that does not exist."""
    missing = _missing(principal, node_needs(principal.project_id, node, config))
    if missing is not None:
        raise Forbidden(f"the API key this job acts for may not {missing.action} on {missing.what}")
