"""What an invocation reads of its run beyond its invoke request (protocol 1.5): the rest of
the history, page by page, and values kept outside the run's items (docs/protocol.md,
section 2.2).

Both calls take the invocation's token (`Authorization: Bearer`), as step calls do, and
read only that run. They are reads: they change nothing, so they need no lease, only a
token that has not expired. They are served at the steps URL (the steps function) and by
the API (a pull worker's `api.url`); never by S3 itself, so under `ezgh dev` an app reaches
nothing but the engine's own front.
"""

from __future__ import annotations

import re
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, history_store, payloads, runs_store
from ezgh_engine.config import settings
from ezgh_engine.core import tokens
from ezgh_engine.core.sizes import LAMBDA_PAYLOAD_BYTES, carried_size, json_text
from ezgh_engine.errors import NotFound, PayloadTooLarge, ValidationError
from ezgh_engine.protocol import bounds
from ezgh_engine.service import wire

# The payload paths an invoke request names as references (`adapters.payloads`): the run's
# input, and a step's output kept in S3 (`steps/<stepId>[/<writer>]/output`, each segment
# percent-encoded). Keys of the run's own prefix: nothing else is read.
_SEGMENT = r"[A-Za-z0-9._~%-]{1,512}"
PAYLOAD_PATH = re.compile(rf"^(input|steps/{_SEGMENT}(/{_SEGMENT})?/output)$")
# The answer holding every step not ended (a pull task too small for them) is one Lambda
# answer: its 6 MB, with room for its envelope.
PENDING_PAGE_BYTES = LAMBDA_PAYLOAD_BYTES - 64 * 1024


def _claims(token: str) -> tokens.InvocationClaims:
    return tokens.verify(settings().token_secret, token, clock.now_ms())


def _body(body: Any, field: str) -> str:
    if not isinstance(body, dict) or not isinstance(body.get(field), str) or not body[field]:
        raise ValidationError(f"{field}: required, a string")
    return str(body[field])


def read_payload(token: str, body: Any) -> dict[str, Any]:
    """`{"value": <json>}`: the value at the payload path `ref` of the token's run."""
    claims = _claims(token)
    ref = _body(body, "ref")
    if not PAYLOAD_PATH.match(ref):
        raise ValidationError("ref: not a reference this protocol gives")
    return {"value": payloads.get(claims.project_id, claims.run_id, ref)}


def read_history(token: str, body: Any) -> dict[str, Any]:
    """`{"steps": [...], "nextCursor": str|null}`: the page of the token's run's history
    that `cursor` opens (a cursor an invoke request or an earlier page gave)."""
    claims = _claims(token)
    cursor = ddb.decode_cursor(_body(body, "cursor"), scope=wire.history_scope(claims.run_id))
    phase = (cursor.get("phase") or {}).get("S")
    if phase == wire.PHASE_PENDING:
        return _pending_page(claims.run_id)
    if phase != wire.PHASE_ENDED:
        raise ValidationError("cursor is not valid: pass the stepsCursor this invocation got")
    after = (cursor.get("after") or {}).get("M")
    return _ended_page(claims.run_id, after)


def _pending_page(run_id: str) -> dict[str, Any]:
    """Every step of the run not ended, read at once (a pull task too small to list them):
    the SDK's view of what is pending is this one moment's. Then the ended ones."""
    run = runs_store.get_run(run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    steps = [wire.step_ref_body(run.id, s) for s in run.steps if not wire.ended(s)]
    page = {"steps": steps, "nextCursor": wire.history_cursor(run.id, wire.PHASE_ENDED)}
    if carried_size(json_text(page)) > PENDING_PAGE_BYTES:
        raise PayloadTooLarge(
            f"run {run_id} has {len(steps)} steps waiting, more than one answer holds"
        )
    return page


def _ended_page(run_id: str, after: dict[str, Any] | None) -> dict[str, Any]:
    """The ended steps of the next page of step items: at most `HISTORY_PAGE_ITEMS` items
    and `HISTORY_PAGE_BYTES` (the page ends early at the step that would pass it). A step
    not ended is left out: it was not ended when the request was built either (an ended
    step never becomes pending while an invocation holds the run), so the request listed
    it, or the history's first page did."""
    found, last = history_store.steps_page(run_id, after=after, limit=bounds.HISTORY_PAGE_ITEMS)
    steps: list[dict[str, Any]] = []
    used = carried_size(json_text({"steps": [], "nextCursor": "c" * 512}))
    read: dict[str, Any] | None = after  # the key of the last item this page took
    for step, key in found:
        if wire.ended(step):
            body = wire.step_ref_body(run_id, step)
            size = carried_size(json_text(body)) + 1
            if steps and used + size > bounds.HISTORY_PAGE_BYTES:
                resume = wire.history_cursor(run_id, wire.PHASE_ENDED, read)
                return {"steps": steps, "nextCursor": resume}
            steps.append(body)
            used += size
        read = key
    following = wire.history_cursor(run_id, wire.PHASE_ENDED, last) if last else None
    return {"steps": steps, "nextCursor": following}
