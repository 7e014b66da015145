"""Branch invocations: each parallel step runs in an invocation of its own (issue 3).

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
from ezgh_engine.adapters import registry_store, run_writes, runs_store, steps_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.intents import NewEvent, StepChange
from ezgh_engine.adapters.push import AppTimedOut, AppUnreachable, invoke_app
from ezgh_engine.config import settings
from ezgh_engine.core import leases
from ezgh_engine.core.events import EVENT_ID
from ezgh_engine.core.messages import Retry
from ezgh_engine.core.models import App, Run, RunError
from ezgh_engine.core.run_errors import APP_DELETED
from ezgh_engine.protocol import outcomes as outcome_rules
from ezgh_engine.service import timers, waits
from ezgh_engine.service.flow_hosting import interpreter_app_of
from ezgh_engine.service.invoker import step_timed_out_error
from ezgh_engine.service.wire import invoke_request

log = logging.getLogger(__name__)


def _end_step(run_id: str, step_id: str, epoch: int, status: str, error: RunError) -> None:
    """End the branch's step with an error (cancelled run, unreachable app); the outbox
    asks for its run's next invocation when it sees the end."""
    update = StepChange(
        run_id,
        step_id,
        {
            "status": status,
            "endedAt": clock.iso(clock.now()),
            "error": error.to_api(),
            "branchLeaseUntil": 0,
        },
        "branchEpoch = :e AND #status IN (:waiting, :running)",
        {":e": epoch, ":waiting": "waiting", ":running": "running"},
    )
    run_writes.transact([update])


def _release(run_id: str, step_id: str, epoch: int, until_ms: int, failures: int) -> None:
    update = StepChange(
        run_id,
        step_id,
        {"branchLeaseUntil": until_ms, "branchFailures": failures},
        "branchEpoch = :e",
        {":e": epoch},
    )
    run_writes.transact([update])


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
        _end_step(run_id, step_id, epoch, "cancelled", waits.CANCELLED_ERROR)
        return None
    # As read a moment ago (a gather's branches read one app item): the main invocation
    # reads it consistently and fails a run whose app was deleted; a delivery that fails
    # forgets it, so the next one reads the app as it is now (`_app`).
    app = _app(run)
    if app is None:  # the app was deleted: the run ends now (no invocation may come)
        timers.end_now(run_id, "failed", APP_DELETED)
        return None
    invocation_id, started_at = ids.time_ordered_id(), clock.iso(clock.now())
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
    _record_invocation(run.id, run.attempt, step_id, invocation_id, started_at, outcome)
    if outcome.kind == "aborted":
        return _aborted(run_id, step_id, epoch, failures)
    _settle(run_id, step_id, epoch, attempt_before)
    return None


def _app(run: Run) -> App | None:
    """The app a branch invokes: as this environment read it less than
    `registry_store.APP_CACHE_SECONDS` ago, or the engine's interpreter of a flow's run."""
    return registry_store.get_app_cached(run.project_id, run.app_id) or interpreter_app_of(run)


def _aborted(run_id: str, step_id: str, epoch: int, failures: int) -> Retry | None:
    """The SDK's step call was refused as stale (docs/protocol.md section 2: this delivery's
    hold on the step ran out or another delivery took it, or the run ended): the branch did
    not fail to reach its step, and its step is not failed. Release it (only if this
    delivery still holds it) and let the branch message come back: the next delivery runs
    the step, or finds it ended (or its run) and drops the message, as an `aborted` main
    invocation is invoked again."""
    _release(run_id, step_id, epoch, 0, failures)
    return Retry(after_seconds=1)


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
        _end_step(run_id, step_id, epoch, "failed", RunError(**error))
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
        _end_step(run_id, step_id, epoch, "failed", error)
        return None
    delay = max(leases.backoff_seconds(failures), (until_ms - clock.now_ms()) / 1000)
    _release(run_id, step_id, epoch, clock.now_ms() + int(delay * 1000), failures)
    return Retry(after_seconds=delay)


def _settle(run_id: str, step_id: str, epoch: int, attempt_before: int) -> None:
    """After the answer: release the step's lease, or fail a step the branch never ran."""
    after = ws.get(f"RUN#{run_id}", f"STEP#{step_id}") or {}
    # A step this invocation started (its attempt moved) that is `waiting` again is a retry
    # that came due before the answer: the stream has sent its next branch message.
    retry_due = after.get("status") == "waiting" and int(after.get("attempt", 0)) != attempt_before
    if after.get("status") in ("waiting", "running") and not retry_due:
        # The SDK answered without ending its step (it never reached it): fail it, so the
        # main invocation replays and meets whatever went wrong itself.
        error = RunError(
            "workflows.nondeterminism",
            "BranchNotRun",
            f"the branch invocation did not run step {step_id}",
        )
        _end_step(run_id, step_id, epoch, "failed", error)
    elif int(after.get("branchLeaseUntil", 0)) or int(after.get("branchFailures", 0)):
        _release(run_id, step_id, epoch, 0, 0)  # (a step's end released it already)


def _record_invocation(
    run_id: str,
    attempt: int,
    step_id: str,
    invocation_id: str,
    started_at: str,
    outcome: outcome_rules.Outcome,
) -> None:
    expires = int(clock.now().timestamp()) + run_writes.CHILD_ITEM_TTL_SECONDS
    fields = {
        EVENT_ID: ids.time_ordered_id(),  # the outcome's own ID
        "invocationId": invocation_id,
        "deploymentId": outcome.deployment_id,
        "stepId": step_id,
        "startedId": invocation_id,
        "startedAt": started_at,
    }
    # One item, keyed by its earliest event (the start): the outcome, carrying the start
    # (`core.events`).
    event = NewEvent(
        run_id,
        attempt,
        f"invocation.{outcome.kind}",
        clock.iso(clock.now()),
        expires,
        invocation_id,
        fields,
    )
    run_writes.write_each([event])
