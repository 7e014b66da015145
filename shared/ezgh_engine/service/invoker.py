"""The invoker: invokes a run for an `invoke` message (or a timer that woke it).

It leases the run, calls its app with the recorded steps (a pull app: queues a task), and
writes the outcome under the lease. Every path is idempotent: a duplicate or late message
finds the lease taken or the reason handled, and does nothing. The queue's other messages are
dispatched by `service.invocation_queue`, which reads them all (`core.messages`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import invocations_store as store
from ezgh_engine.adapters import messages, registry_store, runs_store
from ezgh_engine.adapters.push import AppTimedOut, AppUnreachable, RequestTooLarge, invoke_app
from ezgh_engine.config import settings
from ezgh_engine.core import leases, run_facts, tokens
from ezgh_engine.core.messages import Retry, Timer
from ezgh_engine.core.models import Run, RunError
from ezgh_engine.core.protocol_rules import (
    MAX_THROTTLED_DELIVERIES,
    THROTTLED_OUTCOME,
    throttled_delay_seconds,
)
from ezgh_engine.core.run_errors import APP_DELETED, request_too_large
from ezgh_engine.core.sizes import json_text
from ezgh_engine.errors import StaleInvocation, TransientError, ValidationError
from ezgh_engine.observability import emit, logs
from ezgh_engine.protocol import ops as protocol_ops
from ezgh_engine.protocol import outcomes as outcome_rules
from ezgh_engine.service import outcomes, pull, timers
from ezgh_engine.service import steps as step_calls
from ezgh_engine.service.flow_hosting import interpreter_app_of
from ezgh_engine.service.wire import invoke_request

__all__ = ["Retry", "invoke", "invoke_request", "on_timer"]

log = logging.getLogger(__name__)


def _lease_ms() -> int:
    return leases.lease_ms(settings().invoke_timeout_seconds)


def invoke(run_id: str, seq: int) -> Retry | None:
    """Answer reason `seq` of the run: take its lease and invoke it. A `Retry` when the
    message must come back (another invocation holds the run, or the delivery failed)."""
    now_ms, lease_ms = clock.now_ms(), _lease_ms()
    run = store.take_lease(run_id, seq, now_ms=now_ms, lease_ms=lease_ms)
    if run is None:
        return _why_not_leased(run_id, seq, now_ms)
    return _invoke_leased(run_id, run, now_ms, lease_ms)


def on_timer(timer: Timer) -> Retry | None:
    """Act on a timer (`service.timers`). A sleep that ends takes the lease with its wake-up
    write: the run is invoked here and now."""
    now_ms, lease_ms = clock.now_ms(), _lease_ms()
    owed = timers.fire_timer(timer, lease_ms=lease_ms)
    if owed is None:
        return None
    if not owed.leased:  # the handler that woke it died: invoke as an invoke message would
        return invoke(owed.run_id, owed.seq)
    _invoke_for_timer(owed.run_id, owed.epoch, now_ms, lease_ms)
    return None


def _invoke_for_timer(run_id: str, epoch: int, now_ms: int, lease_ms: int) -> None:
    """Invoke a run a timer woke with its lease (`epoch`, the one its wake-up took). Its
    message is a timer's, which must not come back (the step is awake, it would be
    dropped): a delivery to retry later goes back as an invoke message, delayed like a
    held one."""
    retry = _invoke_leased(run_id, None, now_ms, lease_ms, taken_epoch=epoch)
    if retry is None:
        return
    run = runs_store.get_run(run_id, with_steps=False)
    if run is not None and not run.ended:
        delay = min(900, math.ceil(retry.after_seconds))
        messages.send_invocation(run_id, run.invoke_seq, delay_seconds=delay)


def _invoke_leased(
    run_id: str,
    leased: Run | None,
    now_ms: int,
    lease_ms: int,
    *,
    taken_epoch: int | None = None,
) -> Retry | None:
    """Invoke the run whose lease this handler took (`leased`: the run as the lease write
    answered; None when that write answered nothing, as a timer's wake-up transaction,
    which took `taken_epoch`)."""
    started_at = clock.iso(clock.now())
    invocation_id = ids.time_ordered_id()
    with logs.bound(run_id=run_id, invocation_id=invocation_id):
        return _invoke_read(
            run_id, leased, now_ms, lease_ms, taken_epoch, started_at, invocation_id
        )


def _invoke_read(
    run_id: str,
    leased: Run | None,
    now_ms: int,
    lease_ms: int,
    taken_epoch: int | None,
    started_at: str,
    invocation_id: str,
) -> Retry | None:
    """`_invoke_leased` once its invocation has an ID (bound to its log lines)."""
    full = runs_store.get_run(run_id)
    if full is None:
        return None
    logs.also(app_id=full.app_id)
    if leased is None and taken_epoch is not None and full.epoch != taken_epoch:
        # This handler stalled past its lease and a newer invocation holds the run: act
        # only on the epoch it took, so it neither runs a second attempt nor moves the
        # newer invocation's lease.
        log.info(
            "run %s: epoch %d was taken over; dropping the timer's invocation", run_id, taken_epoch
        )
        return None
    run = _with_lease(full, leased) if leased is not None else full
    # Answer every reason known when the steps were read, not just the message's: a newer
    # reason's effects are in `full` already, so one invocation covers them all.
    seq = run.invoke_seq
    # A job's app, the interpreter, has no record (service/flow_hosting.py).
    app = registry_store.get_app(run.project_id, run.app_id) or interpreter_app_of(run)
    # A cancelling run is invoked like any other: the SDK raises its cancellation error in
    # the workflow, whose cleanup may still run steps.
    if _past_deadline(run):
        timers.time_out(run.id)
        return None
    if app is None:
        _end(run, seq, "failed", APP_DELETED, invocation_id, started_at)
        return None
    if app.kind == "pull":  # queue a task for the app's workers; don't wait
        refused = pull.dispatch(app, run, seq, invocation_id, started_at)
        if refused is not None:
            _end(run, seq, "failed", refused, invocation_id, started_at)
        return None
    return _push(_Attempt(run, app, seq, invocation_id, started_at, now_ms, lease_ms))


@dataclass(frozen=True)
class _Attempt:
    """One push invocation of a leased run: what its request and its answer's write need."""

    run: Run
    app: Any
    seq: int
    invocation_id: str
    started_at: str
    now_ms: int
    lease_ms: int

    def delivery_failed(self, exc: AppUnreachable, until_ms: int = 0) -> Retry | None:
        return _delivery_failed(
            self.run, self.seq, exc, self.invocation_id, self.started_at, until_ms=until_ms
        )


def _push(attempt: _Attempt) -> Retry | None:
    """Send the invoke request to the push app and record its answer."""
    run, app = attempt.run, attempt.app
    request = invoke_request(
        run, attempt.invocation_id, attempt.lease_ms, attempt.now_ms, app_protocol=app.protocol
    )
    answered = _Answered(attempt)
    try:
        answer = invoke_app(app, request)
        outcome = outcome_rules.parse(answer, clock.now())
        answered.said(outcome.kind)
    except RequestTooLarge as exc:
        answered.said("tooLarge")
        # Only a request in the 1.4 shape grows past what an app takes (1.5: `bounds`).
        log.warning("run %s: %s", run.id, exc.message)
        size = len(json_text(request).encode())
        _end(
            run,
            attempt.seq,
            "failed",
            request_too_large(size, f"app {app.name}"),
            attempt.invocation_id,
            attempt.started_at,
        )
        return None
    except AppTimedOut as exc:
        answered.said("timedOut")
        failed, young_since_ms = fail_overrunning_steps(run, attempt.now_ms, attempt.lease_ms)
        if young_since_ms:
            # A step started late in the invocation still runs: keep the lease to its
            # token's end (its body may finish and record itself), and on until it has had
            # the whole limit from its own start, so a body that ends within the limit is
            # never started again beside itself.
            until_ms = max(
                attempt.now_ms + attempt.lease_ms,
                young_since_ms + int(settings().invoke_timeout_seconds * 1000),
            )
            return attempt.delivery_failed(exc, until_ms=until_ms)
        if failed:
            return _invoke_again(run, at_once=True)
        return attempt.delivery_failed(exc)
    except AppUnreachable as exc:
        answered.said("unreachable")
        return attempt.delivery_failed(exc)
    except outcome_rules.MalformedOutcome as exc:
        answered.said("invalid")
        return attempt.delivery_failed(
            AppUnreachable(f"app {app.name} answered an invalid outcome: {exc}")
        )
    if outcome.kind == "aborted":
        # The SDK gave up while this invocation still held the run (a step it had gone on
        # from was recorded otherwise, or its token ran out): nothing to write, but the run
        # must be invoked again. A truly stale invocation's lease is gone: back_off refuses.
        return _invoke_again(run)
    if outcome.kind == THROTTLED_OUTCOME:
        return _throttled(attempt, outcome, answer)
    return _record_answer(attempt, outcome, answer)


class _Answered:
    """How the app answered an invocation, emitted once as its fact (`observability`): the
    app's latency (from the request's start to its answer) and what it said."""

    def __init__(self, attempt: _Attempt) -> None:
        self._attempt = attempt
        self._began = clock.iso(clock.now())

    def said(self, status: str) -> None:
        attempt, run = self._attempt, self._attempt.run
        fact = run_facts.Fact(
            kind=run_facts.INVOCATION,
            run_id=run.id,
            at=clock.iso(clock.now()),
            status=status,
            started_at=self._began,
            created_at=run.created_at,
            app_id=run.app_id,
            workflow=run.workflow,
            attempt=run.attempt,
            invocation_id=attempt.invocation_id,
        )
        emit.record(fact, app_name=attempt.app.name, invocation_began=attempt.started_at)


def _record_answer(attempt: _Attempt, outcome: Any, answer: Any) -> Retry | None:
    """Write the app's outcome (and the step ends it carries) under the invocation's lease."""
    run, app = attempt.run, attempt.app
    try:
        outcomes.apply_answer(
            run,
            attempt.seq,
            outcome,
            _ops_of(answer),
            claims=_claims(attempt),
            invocation_id=attempt.invocation_id,
            started_at=attempt.started_at,
            # Known here for free: an app without notifications needs no notify message.
            notify=app.notifications is not None,
        )
    except StaleInvocation:
        log.info("run %s: lease lost before the outcome was written; ignoring it", run.id)
    except ValidationError as exc:
        return attempt.delivery_failed(
            AppUnreachable(f"app {app.name} answered invalid step ops: {exc.message}")
        )
    except outcomes.OpsConflict as exc:
        log.warning("run %s: %s; invoking it again", run.id, exc)
        return _invoke_again(run)
    return None


def _claims(attempt: _Attempt) -> tokens.InvocationClaims:
    """What the invocation's token allowed: the writes its answer's ops may make."""
    run = attempt.run
    return tokens.InvocationClaims(
        run.id, run.project_id, run.epoch, run.attempt, attempt.now_ms + attempt.lease_ms
    )


def _ops_of(answer: Any) -> Any:
    return answer.get("ops") if isinstance(answer, dict) else None


def _invoke_again(run: Run, *, at_once: bool = False) -> Retry | None:
    """The answer was not applied (it conflicts with recorded steps): release the lease
    soon and let the message come back, so the next invocation replays what is recorded.
    `at_once`: the lease ends now, so the invocation that had it starts nothing more."""
    release_at = clock.now_ms() + (0 if at_once else 1000)
    try:
        store.back_off(run, failures=run.invoke_failures, retry_at_ms=release_at)
    except StaleInvocation:
        return None
    return Retry(after_seconds=1)


STEP_TIMED_OUT = "workflows.step_timed_out"


def step_timed_out_error(step_name: str) -> dict[str, str]:
    """The error of a step still running when its invocation's time ran out."""
    limit = settings().invoke_timeout_seconds
    return {
        "code": STEP_TIMED_OUT,
        "name": "StepTimedOut",
        "message": (
            f"step {step_name!r} was still running when its invocation reached the invoke "
            f"timeout of {limit:g} s (EZGH_INVOKE_TIMEOUT_SECONDS); a step must end within it"
        ),
    }


def fail_overrunning_steps(run: Run, now_ms: int, lease_ms: int) -> tuple[int, int]:
    """The app did not answer within the invoke timeout (the invocation began at `now_ms`):
    fail, once and without a retry, every step this invocation started that is still
    running and has run for at least half the limit (its body may be running still; another
    attempt would run beside it, and would overrun the same way). Answer how many were
    failed, and when the latest younger step still running started (epoch ms, 0 if none:
    started late in the invocation, they are given the rest of the lease, and the limit
    from their own start, rather than failed for the time steps before them took).

    Each is the `fail` op the invocation itself would send, under its own lease: a step
    another epoch started, or one that ended meanwhile, is not touched."""
    current = runs_store.get_run(run.id)
    # Only what this invocation started: a step an earlier invocation left `running` (its
    # end lost in a crash) was not reached by this one, whose app may not have run at all
    # (it hung before its first step); the next invocation starts it again.
    running = [
        s
        for s in (current.steps if current else ())
        if s.status == "running" and s.started_at and _ms(s.started_at) >= now_ms
    ]
    if not running or current is None or current.epoch != run.epoch:
        return 0, 0
    claims = tokens.InvocationClaims(
        run.id, run.project_id, run.epoch, run.attempt, now_ms + lease_ms
    )
    half_ms = int(settings().invoke_timeout_seconds * 500)
    cutoff_ms = clock.now_ms() - half_ms
    young = [s for s in running if s.started_at and _ms(s.started_at) > cutoff_ms]
    failed = 0
    for step in running:
        if step in young:
            continue
        op: dict[str, Any] = {
            "op": "fail",
            "stepId": step.id,
            "error": step_timed_out_error(step.name),
            "retryable": False,
            "attempt": step.attempt,
        }
        if step.inline:  # started by a mark on the step before: its item is made now
            op["inline"] = {"name": step.name, "order": step.order, "startedAt": step.started_at}
        try:
            fail = protocol_ops.parse_answer_ops([op])
            differs = step_calls.apply_answer_ops(claims, None, fail)
        except (StaleInvocation, ValidationError) as exc:
            log.info("run %s: could not fail overrunning step %s: %s", run.id, step.id, exc)
            continue
        if not differs:
            log.warning("run %s: step %s overran the invoke timeout; failed", run.id, step.id)
            failed += 1
    return failed, max((_ms(s.started_at) for s in young if s.started_at), default=0)


def _ms(iso: str) -> int:
    return int(clock.parse_iso(iso).timestamp() * 1000)


def _with_lease(full: Run, leased: Run) -> Run:
    return replace(
        full,
        epoch=leased.epoch,
        lease_until_ms=leased.lease_until_ms,
        invoke_seq=max(full.invoke_seq, leased.invoke_seq),
    )


def _why_not_leased(run_id: str, seq: int, now_ms: int) -> Retry | None:
    run = runs_store.get_run(run_id, with_steps=False)
    if run is None or run.ended or run.handled_seq >= seq:
        return None  # done already: drop the duplicate
    if run.lease_until_ms > now_ms:
        # Another invocation holds the run (or backs off): come back when its lease ends.
        return Retry(after_seconds=(run.lease_until_ms - now_ms) / 1000 + 1)
    return Retry(after_seconds=1)


def _past_deadline(run: Run) -> bool:
    """Past its own time limit or its one-year limit (each also has its timer, armed by the
    stream: this check only spares an invocation that would be cut off anyway)."""
    if run.deadline_at is not None and clock.parse_iso(run.deadline_at) <= clock.now():
        return True
    return clock.parse_iso(timers.year_limit(run.created_at)) <= clock.now()


def _delivery_failed(
    run: Run,
    seq: int,
    exc: AppUnreachable,
    invocation_id: str,
    started_at: str,
    *,
    until_ms: int = 0,
) -> Retry | None:
    """Count a failed delivery and back off (2 s doubling, at most 5 min; at least until
    `until_ms`), or end the run once the budget is spent."""
    failures = run.invoke_failures + 1
    log.warning("run %s: delivery %d failed: %s", run.id, failures, exc.message)
    if failures >= settings().invoke_max_attempts and run.status == "cancelling":
        _end(run, seq, "cancelled", None, invocation_id, started_at)
        return None
    if failures >= settings().invoke_max_attempts:
        error = RunError(
            "workflows.app_unreachable",
            "AppUnreachable",
            f"the app could not be reached after {failures} attempts: {exc.message}",
        )
        _end(run, seq, "failed", error, invocation_id, started_at)
        return None
    delay = leases.backoff_seconds(failures)
    delay = max(delay, (until_ms - clock.now_ms()) / 1000)
    try:
        store.back_off(run, failures=failures, retry_at_ms=clock.now_ms() + int(delay * 1000))
    except StaleInvocation:
        return None
    return Retry(after_seconds=delay)


def _throttled(attempt: _Attempt, outcome: outcome_rules.Outcome, answer: Any) -> Retry | None:
    """The app's step calls stayed throttled (the engine was busy, not the app): write the
    step ends the answer carried (`_write_held_ends`), then deliver it again after the throttled
    backoff (`protocol_rules.throttled_delay_seconds`), counting no failed delivery. The
    bound: past `MAX_THROTTLED_DELIVERIES` in a row without an outcome, each counts as a
    failed delivery, so a run is never delivered forever."""
    run, retry_after = attempt.run, outcome.retry_after
    try:
        _write_held_ends(attempt, outcome, answer)
    except StaleInvocation:
        log.info("run %s: lease lost before the held step ends were written", run.id)
        return None
    except ValidationError as exc:
        return attempt.delivery_failed(
            AppUnreachable(f"app {attempt.app.name} answered invalid step ops: {exc.message}")
        )
    throttles = run.invoke_throttles + 1
    if throttles > MAX_THROTTLED_DELIVERIES:
        return attempt.delivery_failed(
            AppUnreachable(
                f"the engine stayed throttled for {run.invoke_throttles} deliveries in a row"
            )
        )
    delay = throttled_delay_seconds(throttles, retry_after, ids.random_fraction())
    log.warning(
        "run %s: delivery throttled (%d in a row); again in %.1f s", run.id, throttles, delay
    )
    retry_at_ms = clock.now_ms() + int(delay * 1000)
    try:
        store.back_off(
            run, failures=run.invoke_failures, retry_at_ms=retry_at_ms, throttles=throttles
        )
    except StaleInvocation:
        return None
    return Retry(after_seconds=delay)


def _write_held_ends(attempt: _Attempt, outcome: outcome_rules.Outcome, answer: Any) -> None:
    """Write the step ends a `throttled` answer carried: steps that ran before the engine
    stayed busy, which then do not run again. Those that cannot be written now (still
    throttled, or recorded otherwise) are left: the next delivery replays what is recorded
    and runs them again, at least once. `StaleInvocation`, `ValidationError` as an
    answer's ops raise them."""
    ops = _ops_of(answer)
    if ops is None:
        return
    try:
        outcomes.write_held_ends(outcome, ops, claims=_claims(attempt))
    except (TransientError, outcomes.OpsConflict) as exc:
        log.warning("run %s: a throttled answer's step ends not written: %s", attempt.run.id, exc)


def _end(
    run: Run, seq: int, status: str, error: RunError | None, invocation_id: str, started_at: str
) -> None:
    outcome = outcome_rules.Outcome(status if status == "cancelled" else "failed", error=error)
    try:
        outcomes.apply(run, seq, outcome, invocation_id=invocation_id, started_at=started_at)
    except StaleInvocation:
        log.info("run %s: lease lost before ending it %s", run.id, status)
