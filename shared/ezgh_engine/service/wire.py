"""Recorded steps as the invocation protocol shows them (docs/protocol.md section 1.2)."""

from __future__ import annotations

from typing import Any

from ezgh_engine.adapters import payloads
from ezgh_engine.core.models import Step


def step_body(project_id: str, run_id: str, step: Step) -> dict[str, Any]:
    """The API shape, a large output read back inline, plus the protocol-only fields: a
    callback's `url` and a parallel step's `branch`."""
    from ezgh_engine.service import callbacks

    body = step.to_api()
    if step.output_ref:
        body.pop("outputRef")
        body["output"] = payloads.get(project_id, run_id, step.output_ref)
    url = callbacks.url_for(run_id, step)
    if url:
        body["url"] = url
    if step.branch:
        body["branch"] = True
    return body
