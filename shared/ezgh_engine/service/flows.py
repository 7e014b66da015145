"""Flows and their commits: create, read, update, delete, commit a graph, list commits.

Permissions: `flows.manage` with the flow's name as resource; reading a flow, or listing,
needs `flows.manage` or `flows.jobs.read` on it (a list answers only the flows the key may
read). A commit also needs, of the committing key, what its nodes need on the resources
they name outright (`service.flow_authority`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import flows_store
from ezgh_engine.adapters.flows_store import Commit, Flow
from ezgh_engine.core.flows.modules import MODULE_TYPES
from ezgh_engine.core.flows.validate import check_graph
from ezgh_engine.core.models import Principal
from ezgh_engine.errors import Forbidden, NotFound, ValidationError
from ezgh_engine.service.flow_authority import check_graph_needs

MANAGE = "flows.manage"
FLOW_NAME = re.compile(r"^[a-z0-9-]{1,64}$")
BRANCH = re.compile(r"^[A-Za-z0-9._/-]{1,64}$")


def require(principal: Principal, action: str, flow_name: str | None) -> None:
    """403 unless the key holds `action` on this flow (by name)."""
    if not principal.allows(action, flow_name):
        on = f" on flow {flow_name}" if flow_name else ""
        raise Forbidden(f"this API key may not {action}{on}")


def check_branch(branch: str) -> str:
    if not BRANCH.fullmatch(branch):
        raise ValidationError(f"branch {branch!r}: must match {BRANCH.pattern}")
    return branch


def find_flow(principal: Principal, ref: str) -> Flow:
    """The flow by ID, `wff_` slug or name; 404 when absent."""
    flow = flows_store.get_flow(principal.project_id, ref)
    if flow is None:
        raise NotFound(f"flow {ref} not found")
    return flow


def create_flow(principal: Principal, *, name: str, description: str | None) -> Flow:
    if not FLOW_NAME.fullmatch(name):
        raise ValidationError("name must match ^[a-z0-9-]{1,64}$")
    require(principal, MANAGE, name)
    flow = Flow(
        id=ids.new_id(),
        slug=ids.slug("wff"),
        project_id=principal.project_id,
        name=name,
        description=description,
        active_branch="main",
        created_at=clock.iso(clock.now()),
    )
    return flows_store.create_flow(flow)


def list_flows(principal: Principal) -> list[Flow]:
    # `holds`, not `allows(action)`: no resource means every flow, and a key limited to
    # some flows may still list those.
    if not principal.holds(MANAGE) and not principal.holds("flows.jobs.read"):
        raise Forbidden(f"this API key may not {MANAGE}")
    return [
        f
        for f in flows_store.list_flows(principal.project_id)
        if principal.allows(MANAGE, f.name) or principal.allows("flows.jobs.read", f.name)
    ]


def get_flow(principal: Principal, ref: str) -> Flow:
    flow = find_flow(principal, ref)
    if not (principal.allows(MANAGE, flow.name) or principal.allows("flows.jobs.read", flow.name)):
        raise Forbidden(f"this API key may not {MANAGE} on flow {flow.name}")
    return flow


def update_flow(principal: Principal, ref: str, changes: dict[str, Any]) -> Flow:
    """PATCH `activeBranch` and `description` (only the fields present change)."""
    flow = find_flow(principal, ref)
    require(principal, MANAGE, flow.name)
    if "activeBranch" in changes and changes["activeBranch"] is not None:
        flow = replace(flow, active_branch=check_branch(str(changes["activeBranch"])))
    if "description" in changes:
        flow = replace(flow, description=changes["description"])
    return flows_store.save_flow(flow)


def delete_flow(principal: Principal, ref: str) -> None:
    flow = find_flow(principal, ref)
    require(principal, MANAGE, flow.name)
    flows_store.delete_flow(flow)


def commit(
    principal: Principal, ref: str, *, graph: Any, branch: str | None, message: str | None
) -> Commit:
    """Validate the graph (400 naming the node or edge) and store it as an immutable commit.

    The committing key must hold, on every resource a node names outright, what that node
    needs (`flow_authority`): a graph may not name what its author may not do (`403`)."""
    flow = find_flow(principal, ref)
    require(principal, MANAGE, flow.name)
    parsed = check_graph(graph)
    check_graph_needs(principal, parsed, who="this API key")
    new = Commit(
        id=ids.time_ordered_id(),
        flow_id=flow.id,
        branch=check_branch(branch or "main"),
        message=message,
        created_at=clock.iso(clock.now()),
        graph=graph,
    )
    return flows_store.add_commit(new)


def list_commits(
    principal: Principal, ref: str, *, branch: str | None, limit: int, cursor: str | None
) -> tuple[list[Commit], str | None]:
    flow = get_flow(principal, ref)
    if not 1 <= limit <= 100:
        raise ValidationError("limit must be from 1 to 100")
    return flows_store.list_commits(flow.id, branch=branch, limit=limit, cursor=cursor)


def module_types() -> list[dict[str, Any]]:
    """Every built-in module type with its handles and config schema."""
    return [m.to_api() for m in MODULE_TYPES.values()]
