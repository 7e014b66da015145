"""Timer messages: a sleep ends, a retry is due, a wait times out, a run passes its limit.

Every timer is a `core.messages.Timer` (the run's own time limit uses the step ID
`$deadline`). A timer acts only if the step (or run) still holds that wake time,
with a conditional write, so a timer delivered twice, or one made stale by a newer wait, does
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ezgh_engine import clock, ids
from ezgh_engine.adapters import invocations_store as store
from ezgh_engine.adapters import messages, runs_store, steps_store
from ezgh_engine.adapters import run_control_store as control
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core.messages import Timer
from ezgh_engine.core.models import Run, RunError
from ezgh_engine.errors import TransientError
from ezgh_engine.service import waits

DEADLINE_STEP = "$deadline"

# Every run ends by its one-year limit (a day of grace past 365 days from its creation), its
# own time limit or not: the hourly sweep (`service.year_limits`) ends it, so no run depends
# on being invoked again to be ended. (Runs started before the sweep hold a `$deadline`
# schedule for it instead, which fires as any timer does.)
YEAR_LIMIT = timedelta(days=366)


def year_limit(created_at: str) -> str:
    """When a run created at `created_at` ends at the latest (ISO, as its timer carries)."""
    return clock.iso(clock.parse_iso(created_at) + YEAR_LIMIT)


@dataclass(frozen=True)
class Owed:
    """A timer's run to invoke now: `leased` when its wake-up write took the lease (invoke
    at once), else reason `seq` is owed and nothing else will ask for it (see `fire_timer`)."""

    run_id: str
    leased: bool
    seq: int = 0
    epoch: int = 0  # when `leased`: the epoch its wake-up write took, the only one to act on


def fire_timer(message: Timer, lease_ms: int | None = None) -> Owed | None:
    """Act on a timer. With `lease_ms`, a sleep that ends takes the run's lease in the same
    write when it is free, and the answer says to invoke it at once (one message, one
    invoker invocation and one stream record fewer per sleep). The same timer delivered
    again for a sleep it woke, while the run still owes that invocation, answers it owed: the
    handler that took the lease died before answering, and the outbox skips leased runs."""
    wake_at = clock.parse_iso(message.wake_at)
    if wake_at > clock.now() + timedelta(milliseconds=500):
        messages.resend_timer(message, wake_at)
        return None
    run = runs_store.get_run(message.run_id, with_steps=False)
    if run is None or run.ended:
        return None
    if message.step_id == DEADLINE_STEP:
        _fire_deadline(run, message.wake_at)
        return None
    step = steps_store.get_step(run.id, message.step_id)
    if step is None or step.wake_at != message.wake_at:
        return None
    lease = (clock.now_ms(), lease_ms, run.epoch) if lease_ms is not None else None
    if step.kind == "sleep" and step.status == "completed":
        mark = store.wake_mark(step.id, message.wake_at)
        if run.woke != mark:
            # Its wake-up's run write is missing: the handler died between its two writes
            # (or a later sleep's wake-up wrote over the mark: then this asks once more, an
            # invocation that finds nothing new). Ask now, as the wake-up would have.
            return _owed(run, store.ask_after_wake(run.id, mark, lease))
        owed = run.invoke_seq > run.handled_seq
        return Owed(run.id, leased=False, seq=run.invoke_seq) if owed else None
    at = clock.iso(clock.now())
    if step.status == "sleeping":
        marks = steps_store.event_marks(ids.time_ordered_id(), run.attempt, None)
        woke = store.wake_sleep(
            run.id, step.id, wake_at=message.wake_at, ended_at=at, marks=marks, lease=lease
        )
        return _owed(run, woke)
    if step.status == "retrying":
        _retry_due(run.id, step.id, step.branch, message.wake_at)
    elif step.status == "waiting":  # a callback or message wait timed out: it gives null
        actions = waits.end_wait_actions(run.id, run.attempt, step.id, output=None)
        ws.transact(actions + waits.cancel_step_actions(run, run.id, step))
    return None


# How many times a due time limit is written again when the run item changed under it.
DEADLINE_TRIES = 3


def end_at_year_limit(run: Run) -> None:
    """End `run` `timedOut` at its one-year limit, if it is live and past it (the sweep)."""
    _fire_deadline(run, year_limit(run.created_at))


def _fire_deadline(run: Run, wake_at: str) -> None:
    """End the run if `wake_at` is still its time limit (or its one-year limit). `end_now`
    writes conditional on the version it read: a refusal because the run item changed
    meanwhile (an answer, a wake-up) is read again and tried again, not dropped with the
    timer, which nothing would send again (a run suspended on a wait without a timeout of
    its own would run on past its limit). Raises TransientError to have the timer back if
    the run keeps changing."""
    for _ in range(DEADLINE_TRIES):
        if run.deadline_at == wake_at:
            error = TIMED_OUT_ERROR
        elif year_limit(run.created_at) == wake_at:
            error = YEAR_LIMIT_ERROR
        else:
            return  # not its limit (any more): a RetryRun gave it a new one
        if time_out(run.id, error):
            return
        current = runs_store.get_run(run.id, with_steps=False)
        if current is None or current.ended:
            return
        run = current
    raise TransientError(f"run {run.id} kept changing while its time limit was due")


def _owed(run: Run, woke: str | None) -> Owed | None:
    """A wake-up's answer: invoke at once when it took the lease (the outbox sends nothing
    for a leased run); else the outbox, or the invocation holding the run, sees to it."""
    return Owed(run.id, leased=True, epoch=run.epoch + 1) if woke == "leased" else None


def _retry_due(run_id: str, step_id: str, branch: bool, wake_at: str) -> None:
    """The step may run again: without a wake time it is due. A branch's step goes back to
    `waiting` (the stream sends its branch invocation); another step's run is invoked."""
    sets = {"status": "waiting"} if branch else {"retryDueAt": wake_at}
    update = ws.step_update(
        run_id,
        step_id,
        sets=sets,
        when="#status = :retrying AND #wakeAt = :w",
        when_values={":retrying": "retrying", ":w": wake_at},
        remove=("wakeAt",),
    )
    ws.transact([update] if branch else [update, ws.bump_run(run_id)])


TIMED_OUT_ERROR = RunError("workflows.timed_out", "RunTimedOut", "the run went past its time limit")
YEAR_LIMIT_ERROR = RunError(
    "workflows.timed_out", "RunTimedOut", "the run went past its one-year limit (366 days)"
)


def time_out(run_id: str, error: RunError = TIMED_OUT_ERROR) -> bool:
    """End a live run `timedOut` now, whatever invocation holds it (its writes then fail)."""
    return end_now(run_id, "timedOut", error)


def end_now(run_id: str, status: str, error: RunError) -> bool:
    """End a live run with `status` (`timedOut`, `failed`) and `error` now, whatever
    invocation holds it: the epoch moves on, so that invocation's writes fail. Its pending
    steps end with it. False when it had ended already (or changed meanwhile)."""
    run = runs_store.get_run(run_id, with_steps=False)
    if run is None or run.ended:
        return False
    if not control.end_now(run, status, error, at=clock.iso(clock.now())):
        return False
    waits.cancel_leftovers(run_id)
    return True
