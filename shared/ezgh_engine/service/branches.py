"""Branch invocations: each parallel step runs in an invocation of its own.

When steps are awaited together, the main invocation suspends and, once its suspend has
committed, the stream records each unrecorded `run` step as `waiting` with `branch` set
(`service.launches`). The stream sends one `branch` message per such step; handling it takes
the step's own lease (`branchEpoch` + 1, `branchLeaseUntil`: one conditional write), so two
deliveries never run one step at once, and invokes the app with `branch.stepId`: the SDK
replays up to that step, runs only it, and answers `branch`. A wide launch's steps replay from
a copy of the history before it and their own step (`runs_store.get_branch_run`), not from
every sibling. The invocation's token carries the step ID and its branch epoch: it authorizes
that step's start/complete/fail and nothing else. Ending the step releases its lease, and the
stream, seeing a parallel step end, asks for the run's next invocation, which resumes the
workflow.
"""

from __future__ import annotations

import logging

from ezgh_engine import clock, ids
from ezgh_engine.adapters import registry_store, runs_store, steps_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.push import AppTimedOut, AppUnreachable, invoke_app
from ezgh_engine.config import settings
from ezgh_engine.core import leases
from ezgh_engine.core.messages import Retry
from ezgh_engine.core.models import App, Run, RunError
from ezgh_engine.core.protocol_rules import THROTTLED_OUTCOME
from ezgh_engine.core.run_errors import APP_DELETED
from ezgh_engine.protocol import outcomes as outcome_rules
from ezgh_engine.service import branch_answers as answers
from ezgh_engine.service import pull_branch, timers, waits
from ezgh_engine.service.flow_hosting import interpreter_app_of
from ezgh_engine.service.invoker import step_timed_out_error
from ezgh_engine.service.wire import invoke_request

log = logging.getLogger(__name__)


def invoke_branch(run_id: str, step_id: str) -> Retry | None:
    """Handle one `branch` message; a `Retry` when it must come back later."""
    now_ms = clock.now_ms()
    lease_ms = leases.lease_ms(settings().invoke_timeout_seconds)
    raw = steps_store.take_branch_lease(run_id, step_id, now_ms=now_ms, lease_ms=lease_ms)
    if raw is None:
        return _not_leased(run_id, step_id, now_ms)
    epoch, failures = int(raw.get("branchEpoch", 0)), int(raw.get("branchFailures", 0))
    attempt_before = int(raw.get("attempt", 0))
    run = runs_store.get_branch_run(run_id, raw)
    if run is None or run.ended or run.status == "cancelling":
        # An ended run's pending steps end with it (its cleanup may have come first).
        answers.end_step(run_id, step_id, epoch, "cancelled", waits.CANCELLED_ERROR)
        return None
    # As read a moment ago (a gather's branches read one app item): the main invocation
    # reads it consistently and fails a run whose app was deleted; a delivery that fails
    # forgets it, so the next one reads the app as it is now (`_app`).
    app = _app(run)
    if app is None:  # the app was deleted: the run ends now (no invocation may come)
        timers.end_now(run_id, "failed", APP_DELETED)
        return None
    invocation_id, started_at = ids.time_ordered_id(), clock.iso(clock.now())
    if app.kind == "pull":  # a task for the app's workers; this message watches it
        return pull_branch.dispatch(app, run, raw, invocation_id)
    request = invoke_request(
        run,
        invocation_id,
        lease_ms,
        now_ms,
        app_protocol=app.protocol,
        branch_step=step_id,
        branch_epoch=epoch,
    )
    try:
        outcome = outcome_rules.parse(invoke_app(app, request), clock.now())
    except AppTimedOut as exc:
        registry_store.forget_cached_app(app.id)
        return _timed_out(run_id, step_id, epoch, failures + 1, attempt_before, now_ms, exc)
    except (AppUnreachable, outcome_rules.MalformedOutcome) as exc:
        registry_store.forget_cached_app(app.id)
        return _delivery_failed(run_id, step_id, epoch, failures + 1, exc)
    answers.record_invocation(run.id, run.attempt, step_id, invocation_id, started_at, outcome)
    if outcome.kind == "aborted":
        return answers.aborted(run_id, step_id, epoch, failures)
    if outcome.kind == THROTTLED_OUTCOME:
        retry = answers.throttled(run_id, step_id, epoch, failures, outcome.retry_after)
        if retry is not None:
            return retry
        stayed = AppUnreachable(f"app {app.name}: the engine stayed throttled past its bound")
        return _delivery_failed(run_id, step_id, epoch, failures + 1, stayed)
    answers.settle(run_id, step_id, epoch, attempt_before)
    return None


def _app(run: Run) -> App | None:
    """The app a branch invokes: as this environment read it less than
    `registry_store.APP_CACHE_SECONDS` ago, or the engine's interpreter of a flow's run."""
    return registry_store.get_app_cached(run.project_id, run.app_id) or interpreter_app_of(run)


def _not_leased(run_id: str, step_id: str, now_ms: int) -> Retry | None:
    """Another delivery holds the step's lease: come back when it ends. Ended: drop it."""
    raw = ws.get(f"RUN#{run_id}", f"STEP#{step_id}") or {}
    held = int(raw.get("branchLeaseUntil", 0))
    if raw.get("status") in ("waiting", "running") and held > now_ms:
        return Retry(after_seconds=(held - now_ms) / 1000 + 1)
    return None  # ended, or its run did: nothing to do


def _timed_out(
    run_id: str,
    step_id: str,
    epoch: int,
    failures: int,
    attempt_before: int,
    now_ms: int,
    exc: AppTimedOut,
) -> Retry | None:
    """The app took the branch invocation and did not answer within the invoke timeout, as
    `invoker.fail_overrunning_steps` handles a main invocation's (docs/protocol.md section
    11). A step this invocation started that has run half the limit or more fails now, once,
    without a retry (its body may still be running: another attempt would run beside it, and
    overrun the same way); a younger one keeps the step's lease until it had the whole
    limit from its own start, so its body may record its end. One it never started is a
    delivery failure as before."""
    step = ws.get(f"RUN#{run_id}", f"STEP#{step_id}") or {}
    started_at = step.get("startedAt")
    ran_here = (
        step.get("status") == "running"
        and int(step.get("branchEpoch", -1)) == epoch
        and int(step.get("attempt", 0)) != attempt_before
    )
    if not ran_here or not isinstance(started_at, str):
        return _delivery_failed(run_id, step_id, epoch, failures, exc)
    limit_ms = int(settings().invoke_timeout_seconds * 1000)
    started_ms = int(clock.parse_iso(started_at).timestamp() * 1000)
    if clock.now_ms() - started_ms >= limit_ms // 2:
        error = step_timed_out_error(str(step.get("name") or step_id))
        log.warning("run %s: branch step %s overran the invoke timeout; failed", run_id, step_id)
        answers.end_step(run_id, step_id, epoch, "failed", RunError(**error))
        return None
    lease_ms = leases.lease_ms(settings().invoke_timeout_seconds)
    until_ms = max(now_ms + lease_ms, started_ms + limit_ms)
    return _delivery_failed(run_id, step_id, epoch, failures, exc, until_ms=until_ms)


def _delivery_failed(
    run_id: str, step_id: str, epoch: int, failures: int, exc: Exception, until_ms: int = 0
) -> Retry | None:
    """Back off (the run's backoff; at least until `until_ms`), or fail the step once the
    delivery budget is spent."""
    if failures >= settings().invoke_max_attempts:
        error = RunError(
            "workflows.app_unreachable",
            "AppUnreachable",
            f"the app could not be reached after {failures} attempts: {exc}",
        )
        answers.end_step(run_id, step_id, epoch, "failed", error)
        return None
    delay = max(leases.backoff_seconds(failures), (until_ms - clock.now_ms()) / 1000)
    answers.release(run_id, step_id, epoch, clock.now_ms() + int(delay * 1000), failures)
    return Retry(after_seconds=delay)
