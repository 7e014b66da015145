"""A new run's first state, shared by every way a run starts (API, schedule, queue, child)."""

from __future__ import annotations

from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import payloads
from ezgh_engine.config import settings
from ezgh_engine.core import validation
from ezgh_engine.core.models import App, Run


def new_run(
    *,
    run_id: str,
    org_id: str,
    project_id: str,
    app: App,
    workflow: str,
    value: Any,
    run_key: str | None = None,
    schedule_id: str | None = None,
    parent_run_id: str | None = None,
) -> Run:
    """The run as it is first written; a large input goes to the payload bucket first."""
    text = validation.encode_value(value, "input")
    now = clock.iso(clock.now())
    large = len(text.encode()) > settings().payload_inline_bytes
    if large:
        payloads.put(project_id, run_id, payloads.RUN_INPUT_PATH, text)
    return Run(
        id=run_id,
        org_id=org_id,
        project_id=project_id,
        app_id=app.id,
        app_name=app.name,
        workflow=workflow,
        status="running",
        input=value,
        input_ref=payloads.RUN_INPUT_PATH if large else None,
        attempt=1,
        created_at=now,
        started_at=now,
        version=1,
        run_key=run_key,
        schedule_id=schedule_id,
        parent_run_id=parent_run_id,
    )
