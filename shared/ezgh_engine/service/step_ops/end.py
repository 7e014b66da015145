"""`complete` and `fail`: a `run` step's attempt ends. The step's item is updated on the
condition that this invocation's attempt still runs it; a step started inline (its start rode
the previous step's end, `inline` echoed) has no item yet: its end puts the whole item,
refused when one exists. A retryable failure within the retry budget (`may_retry`) waits for
its retry (`retrying`, `wakeAt`) instead of ending the step."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import payloads, run_writes, runs_store
from ezgh_engine.adapters.intents import Intent, StepEnd
from ezgh_engine.core import retries
from ezgh_engine.core.models import Step
from ezgh_engine.core.protocol_rules import may_retry
from ezgh_engine.protocol.ops import Complete, Fail
from ezgh_engine.protocol.results import Ok, RetryAt
from ezgh_engine.service.step_ops import checks
from ezgh_engine.service.step_ops.plan import (
    Caller,
    Fresh,
    Plan,
    answered,
    event,
    is_retry,
    marks,
    recorded,
)


def prepare(caller: Caller, fresh: Fresh, request: Complete | Fail) -> str | None:
    """A completion's output too large to keep in the step's item is stored first: answer
    its payload path (None: kept inline)."""
    del fresh
    if isinstance(request, Fail) or run_writes.inline(request.output_text):
        return None
    # Check the invocation before the object exists: a refused late call must leave no
    # payload behind (its run may be gone, its purge run already).
    if caller.branch_step is not None:
        checks.check_branch_live(caller.claims)
    checks.check_live(caller.claims)
    path = payloads.step_output_path(request.step_id, ids.time_ordered_id())
    runs_store.put_payload(caller.claims.project_id, caller.run_id, path, request.output_text)
    return path


def retry_at(fresh: Fresh, request: Fail) -> str | None:
    """When a failed attempt runs again (None: the step fails): the retry budget decides,
    the backoff (with `fresh.fraction` as its jitter) says when."""
    if not request.retryable or request.attempt is None or request.retries is None:
        return None
    if not may_retry(request.attempt, request.retries):
        return None
    delay = retries.delay_seconds(request.attempt, fresh.fraction)
    return clock.iso(fresh.now + timedelta(seconds=delay))


def plan(
    caller: Caller, fresh: Fresh, request: Complete | Fail, prepared: str | None, *, leased: bool
) -> Plan:
    """The end's write (and a failure's event item; a completion is its step's own event)."""
    del leased  # the same write on the fast path and under the lease
    fields, others, result = _fields(caller, fresh, request, prepared)
    item = StepEnd(
        caller.lease,
        request.step_id,
        fresh.at,
        inline=request.inline,
        expires=fresh.expires,
        **fields,
    )
    # (A branch's step that ended resumes its run: the outbox asks for it, service.stream.)
    return Plan(request.step_id, result, item, others, carries=not isinstance(result, RetryAt))


def _fields(
    caller: Caller, fresh: Fresh, request: Complete | Fail, ref: str | None
) -> tuple[dict[str, Any], tuple[Intent, ...], Ok | RetryAt]:
    """The step writer's arguments, the other writes and the result of an end."""
    step_id = request.step_id
    if isinstance(request, Complete):
        text = None if ref else request.output_text
        done: dict[str, Any] = {"output_text": text, "output_ref": ref, "error": None}
        return {**done, "marks": marks(caller, fresh)}, (), Ok(step_id)
    when = retry_at(fresh, request)
    kind = "step.retrying" if when else "step.failed"
    error = request.error.to_api()
    # A retry's event says when the next attempt is due: the console draws the backoff.
    due = {"retryAt": when} if when else {}
    failure = event(caller, fresh, kind, step_id, error=error, stepAttempt=request.attempt, **due)
    fields: dict[str, Any] = {
        "output_text": None,
        "output_ref": None,
        "error": request.error,
        "retry_at": when,
        "attempt": request.attempt,
    }
    return fields, (failure,), RetryAt(step_id, when) if when else Ok(step_id)


def replan(plan: Plan, step: Step | None, at: str) -> Plan:
    """Refused: a resent retryable fail answers its retry (which may be due already);
    anything else answers what is recorded."""
    if step is not None and step.status == "retrying" and is_retry(plan):
        return answered(RetryAt(plan.step_id, step.wake_at or at), step)
    return recorded(plan.step_id, step)
