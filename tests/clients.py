"""The SDK's client for a local runtime under test: its URL, organization and project."""

from __future__ import annotations

from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import WorkflowsClient


def workflows_client(
    runtime: LocalRuntime,
    key: str | None = None,
    org: str | None = None,
    project: str | None = None,
) -> WorkflowsClient:
    """A `WorkflowsClient` for `runtime`: its admin key, organization and project unless
    others are given."""
    return WorkflowsClient(
        api_key=key or runtime.api_key,
        organization_id=org or runtime.org_id,
        project_id=project or runtime.project_id,
        base_url=runtime.api_url,
    )
