"""Branch invocations: each parallel step runs in an invocation of its own.

When steps are awaited together, the main invocation suspends and, once its suspend has
committed, the stream sends one `branch` message per unrecorded `run` step
(`service.launches`), carrying the run attempt and the step's launch values: the step has no
item yet (the run's readers show it `waiting` from the launch). Handling the message claims
the step: one conditional write takes the step's own lease (`branchEpoch` + 1,
`branchLeaseUntil`), creating the item if it has none, and starts the step's next attempt
(`running`, `attempt` + 1, `startEpoch` = the branch epoch), so two deliveries never run one
step at once and a duplicate runs nothing (`steps_store.take_branch_lease`). A message of a
run that ended ends the step `cancelled`; one of a run attempt a RetryRun replaced removes the
item its claim made. The invoker then invokes the app with `branch: {stepId, attempt}`: the
SDK replays up to that step, runs only it without a `start`, and answers `branch` with the
step's end in `ops`. The invoker writes that end, the lease's release and the invocation's
events in one conditional write of the step (`branch_answers.finish`): two writes a branch.
A wide launch's steps replay from a copy of the history before it and their own step
(`runs_store.get_branch_run`), not from every sibling. The invocation's token carries the
step ID and its branch epoch: it authorizes that step's start, complete and fail and nothing
else, which an SDK that does not read `branch.attempt` still sends (its `start` answers the
attempt the lease started, writing nothing; its `complete` ends the step). Ending the step
releases its lease, and the stream, seeing a parallel step end, asks for the run's next
invocation, which resumes the workflow. A step that has an item and is `waiting` (a retry
that came due, one the run's next outcome wrote while unclaimed, one an older engine's
launch made) gets a message in the old shape (run and step only) from the stream, which
takes that item and creates none. A pull app's branch is a task (`service.pull_branch`),
claimed by the same take, still in the shape with `start`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import registry_store, runs_store, steps_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.push import AppNotReached, AppTimedOut, AppUnreachable, invoke_app
from ezgh_engine.config import settings
from ezgh_engine.core import leases
from ezgh_engine.core.messages import Retry
from ezgh_engine.core.models import App, Run, RunError
from ezgh_engine.core.protocol_rules import THROTTLED_OUTCOME
from ezgh_engine.core.run_errors import APP_DELETED
from ezgh_engine.protocol import outcomes as outcome_rules
from ezgh_engine.protocol.ops import Complete, Fail
from ezgh_engine.service import branch_answers as answers
from ezgh_engine.service import pull_branch, timers, waits
from ezgh_engine.service.flow_hosting import interpreter_app_of
from ezgh_engine.service.invoker import step_timed_out_error
from ezgh_engine.service.wire import invoke_request

log = logging.getLogger(__name__)


def invoke_branch(
    run_id: str,
    step_id: str,
    *,
    attempt: int | None = None,
    values: Mapping[str, Any] | None = None,
) -> Retry | None:
    """Handle one `branch` message; a `Retry` when it must come back later. `attempt` and
    `values`: the run attempt that launched the step and its launch values, which a
    launch's message carries so that its claim creates the step's item."""
    now_ms = clock.now_ms()
    lease_ms = leases.lease_ms(settings().invoke_timeout_seconds)
    started_at = clock.iso(clock.now())
    creates = (attempt, values) if attempt is not None and values else None
    raw = steps_store.take_branch_lease(
        run_id, step_id, now_ms=now_ms, lease_ms=lease_ms, started_at=started_at, creates=creates
    )
    if raw is None:
        return _not_leased(run_id, step_id, now_ms, attempt)
    epoch, failures = int(raw.get("branchEpoch", 0)), int(raw.get("branchFailures", 0))
    step_attempt = int(raw.get("attempt", 1))  # the attempt the lease take started
    run = runs_store.get_branch_run(run_id, raw)
    run = _still_runs(run_id, step_id, run, raw, epoch)
    if run is None:
        return None
    # As read a moment ago (a gather's branches read one app item): the main invocation
    # reads it consistently and fails a run whose app was deleted; a delivery that fails
    # forgets it, so the next one reads the app as it is now (`_app`).
    app = _app(run)
    if app is None:  # the app was deleted: the run ends now (no invocation may come)
        timers.end_now(run_id, "failed", APP_DELETED)
        return None
    invocation_id = ids.time_ordered_id()
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
        branch_attempt=step_attempt,
    )
    try:
        answer = invoke_app(app, request)
        outcome = outcome_rules.parse(answer, clock.now())
        carried = answers.branch_end(answer, step_id)
    except AppTimedOut as exc:
        registry_store.forget_cached_app(app.id)
        return _timed_out(run_id, step_id, epoch, failures + 1, step_attempt - 1, now_ms, exc)
    except (AppUnreachable, outcome_rules.MalformedOutcome) as exc:
        registry_store.forget_cached_app(app.id)
        give_back = never_reached(exc)
        return _delivery_failed(run_id, step_id, epoch, failures + 1, exc, give_back=give_back)
    return _answered(
        run, step_id, epoch, step_attempt, failures, invocation_id, started_at, outcome, carried
    )


def _still_runs(
    run_id: str, step_id: str, run: Run | None, step: dict[str, Any], epoch: int
) -> Run | None:
    """`run` if the step the lease take of `epoch` claimed (`step`, as written) runs now,
    else None. Not when its run is gone, or a RetryRun moved it on after the step was
    launched (and reset its pending steps): the item the claim made is no step of the
    run's, and goes. Nor when its run ended or is cancelling: the step ends `cancelled`
    with it (its cleanup may have come first)."""
    made_by = step.get(runs_store.RUN_ATTEMPT_ATTR)
    if made_by is not None and (run is None or int(made_by) != run.attempt):
        steps_store.drop_stale(run_id, step_id, epoch=epoch, run_attempt=int(made_by))
        return None
    if run is None or run.ended or run.status == "cancelling":
        answers.end_step(run_id, step_id, epoch, "cancelled", waits.CANCELLED_ERROR)
        return None
    return run


def _answered(
    run: Run,
    step_id: str,
    epoch: int,
    attempt: int,
    failures: int,
    invocation_id: str,
    started_at: str,
    outcome: outcome_rules.Outcome,
    carried: Complete | Fail | None,
) -> Retry | None:
    """Apply a branch invocation's answer to its step (attempt `attempt`, started by the
    lease take of branch epoch `epoch`)."""
    if carried is not None:
        # The answer carries the step's end: one write records it, releases the lease and
        # carries this invocation's events. Refused: the step is no longer this attempt's
        # (a duplicate, or a late answer): nothing is recorded twice; the event stays.
        if answers.finish(
            run,
            epoch,
            attempt,
            carried,
            invocation_id=invocation_id,
            started_at=started_at,
            deployment_id=outcome.deployment_id,
        ):
            return None
        log.info("run %s: branch %s answered for an attempt it no longer holds", run.id, step_id)
    # An SDK that ends the step by its own step call (`complete`, the old shape), or an
    # answer without the end: its event item, then the lease (`settle`).
    answers.record_invocation(run.id, run.attempt, step_id, invocation_id, started_at, outcome)
    if outcome.kind == "aborted":
        return answers.aborted(run.id, step_id, epoch, failures)
    if outcome.kind == THROTTLED_OUTCOME:
        retry = answers.throttled(run.id, step_id, epoch, failures, outcome.retry_after)
        if retry is not None:
            return retry
        stayed = AppUnreachable(f"run {run.id}: the engine stayed throttled past its bound")
        return _delivery_failed(run.id, step_id, epoch, failures + 1, stayed)
    answers.settle(run.id, step_id, epoch, attempt - 1)
    return None


def never_reached(exc: Exception) -> bool:
    """Whether a failed delivery surely never reached the app (`push.AppNotReached`), so
    the step's body never ran under the attempt its lease take started. Only then is the
    attempt given back: a body that may have run (a 5xx, a connection dropped after the
    request went out, an answer the protocol does not allow) keeps its attempt number, which
    the next delivery's start moves on, so two executions that may both have had effects
    never see the same `attempt`."""
    return isinstance(exc, AppNotReached)


def _app(run: Run) -> App | None:
    """The app a branch invokes: as this environment read it less than
    `registry_store.APP_CACHE_SECONDS` ago, or the engine's interpreter of a flow's run."""
    return registry_store.get_app_cached(run.project_id, run.app_id) or interpreter_app_of(run)


def _not_leased(run_id: str, step_id: str, now_ms: int, attempt: int | None) -> Retry | None:
    """Another delivery holds the step's lease: come back when it ends. Ended: drop it.
    Held by an item a message of an earlier run attempt created (`attempt`: this message's):
    that message removes it; once its lease ran out, this one does. Then come back."""
    raw = ws.get(f"RUN#{run_id}", f"STEP#{step_id}") or {}
    held = int(raw.get("branchLeaseUntil", 0))
    made_by = raw.get(runs_store.RUN_ATTEMPT_ATTR)
    if attempt is not None and made_by is not None and int(made_by) < attempt:
        if raw.get("status") not in ("waiting", "running"):
            return None  # it ended (its run's end cancelled it): no step of this attempt
        if held <= now_ms:
            epoch = int(raw.get("branchEpoch", 0))
            steps_store.drop_stale(run_id, step_id, epoch=epoch, run_attempt=int(made_by))
            return Retry(after_seconds=1)
        return Retry(after_seconds=min((held - now_ms) / 1000 + 1, 5))
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
    11). The lease take started the step, just before the request went out, so the engine
    cannot tell an app that never reached it from one still in its body: a step this
    invocation holds that has run half the limit or more (at a timeout, always: it had the
    whole limit) fails now, once, without a retry (its body may still be running: another
    attempt would run beside it, and overrun the same way). A younger one (a wait that ended
    early) keeps the step's lease until it had the whole limit from its start, so its body
    may record its end. A step another delivery holds
    is a delivery failure as before."""
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
    run_id: str,
    step_id: str,
    epoch: int,
    failures: int,
    exc: Exception,
    until_ms: int = 0,
    *,
    give_back: bool = False,
) -> Retry | None:
    """Back off (the run's backoff; at least until `until_ms`), or fail the step once the
    delivery budget is spent. `give_back`: the attempt the lease take started is given
    back in the same write (an app that was never reached uses up none of the step's
    retries, `never_reached`)."""
    if failures >= settings().invoke_max_attempts:
        error = RunError(
            "workflows.app_unreachable",
            "AppUnreachable",
            f"the app could not be reached after {failures} attempts: {exc}",
        )
        answers.end_step(run_id, step_id, epoch, "failed", error)
        return None
    delay = max(leases.backoff_seconds(failures), (until_ms - clock.now_ms()) / 1000)
    until = clock.now_ms() + int(delay * 1000)
    kept = {"epoch": epoch, "until_ms": until, "failures": failures}
    if not (give_back and steps_store.give_back_start(run_id, step_id, **kept)):
        answers.release(run_id, step_id, epoch, until, failures)
    return Retry(after_seconds=delay)
