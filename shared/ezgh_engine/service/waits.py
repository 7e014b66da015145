"""Waits: what a suspended invocation asks to wait for, and what ends each wait.

- A new wait becomes a step item made once its suspend has committed (`service.launches`): a
  child run (`invoke`, then the child itself, its ID derived from the parent and the step;
  of another app only where the parent app's key may start it, `service.app_authority`), a
  message wait (`message`, then its waiter index item `MSGWAIT#<project>#<queue>#<key>` /
  `<runId>#<stepId>`), or a parallel branch (`run` with `branch`). A sleep's step, and a
  wait that ended at once (refused), is written ahead of the commit.
- A wait ends with a conditional step update and an `invokeSeq` bump in one transaction
  (`adapters.waits_store`): a message (`resume_message_waiters`), the child's end (from the
  stream), a timeout (`service.timers`), a callback (`service.callbacks`).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import payloads, registry_store, run_writes, runs_store
from ezgh_engine.adapters import run_control_store as control
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.intents import Intent, Launch, NewEvent, NewItem, NewStep
from ezgh_engine.core import validation
from ezgh_engine.core.models import CANCELLED_ERROR, Run, RunError, Step
from ezgh_engine.errors import Conflict, NotFound, ValidationError
from ezgh_engine.protocol.outcomes import Wait
from ezgh_engine.service import app_authority, queues

log = logging.getLogger(__name__)


def _expires() -> int:
    return int(clock.now().timestamp()) + runs_store.CHILD_ITEM_TTL_SECONDS


def child_run_id(parent: Run, step_id: str) -> str:
    """Exactly one child per parent step (per parent attempt after a RetryRun)."""
    if parent.attempt == 1:
        return ids.derived_id(parent.id, step_id)
    return ids.derived_id(parent.id, step_id, str(parent.attempt))


def sleep_step(
    run: Run, *, step_id: str, name: str, order: str, started_at: str, wake_at: str, expires: int
) -> NewStep:
    """A new `sleeping` step, written ahead of its suspend's commit: its timer (armed by the
    stream when it sees it) finds it, and a retry of the outcome finds it recorded."""
    values = {
        "name": name,
        "kind": "sleep",
        "status": "sleeping",
        "attempt": 1,
        "order": order,
        "startedAt": started_at,
        "wakeAt": wake_at,
        "ttl": expires,
    }
    return NewStep(run.id, step_id, values)


@dataclass(frozen=True)
class NewWait:
    """How a suspend records a new wait (not a sleep): `ahead`, a step written before the
    commit (a wait that ended at once, refused); `launch`, what starts once the suspend committed
    (the step and what ends it: a branch invocation, a child run, a waiter index)."""

    ahead: tuple[NewStep, ...] = ()
    launch: Launch | None = None

    @property
    def ended_at_once(self) -> bool:
        """A wait that ended already (a message wait on a queue that is not there, an
        invoke the app's key may not start): the run must be invoked again to see it."""
        return any(step.values.get("status") == "failed" for step in self.ahead)


def suspend_writes(run: Run, wait: Wait, *, at: str, order: str) -> NewWait:
    """What records a new wait (not a sleep) of a suspended invocation."""
    base = {
        "name": wait.name,
        "kind": wait.kind,
        "attempt": 1,
        "order": order,
        "startedAt": at,
        "ttl": _expires(),
    }
    if wait.kind == "run" and wait.parallel:  # a parallel branch, run by its own invocation
        values = {
            **base,
            "status": "waiting",
            "attempt": 0,
            "branch": True,
            "branchEpoch": 0,
            "branchLeaseUntil": 0,
        }
        return NewWait(launch=Launch((NewStep(run.id, wait.step_id, values),)))
    if wait.kind == "message":
        queue_id, error = _wait_queue(run, wait.queue_id or "")
        if error is not None:  # failed now, as `send_to_queue` fails: never a silent wait
            failed = {**base, "status": "failed", "endedAt": at, "error": error.to_api()}
            return NewWait(ahead=(NewStep(run.id, wait.step_id, failed),))
        wake = clock.iso(clock.now() + wait.timeout) if wait.timeout else None
        values = {
            **base,
            "status": "waiting",
            "wakeAt": wake,
            "queueId": queue_id,
            "msgKey": wait.key,
            "projectId": run.project_id,
        }
        index = {
            "pk": ws.msgwait_pk(run.project_id, queue_id, wait.key or ""),
            "sk": f"{run.id}#{wait.step_id}",
            "type": "msgwait",
            "runId": run.id,
            "stepId": wait.step_id,
            # Whose wait it is: a resume subscription resumes its own app's workflow only.
            "appId": run.app_id,
            "workflow": run.workflow,
            "ttl": _expires(),
        }
        step = NewStep(run.id, wait.step_id, values)
        return NewWait(launch=Launch((step, NewItem(index, only_new=False))))
    if wait.kind == "invoke":
        child_id = child_run_id(run, wait.step_id)
        values = {**base, "status": "waiting", "childRunId": child_id}
        step = NewStep(run.id, wait.step_id, values)
        if runs_store.get_run(child_id, with_steps=False) is not None:
            return NewWait(launch=Launch((step,)))
        refused = _invoke_refusal(run, wait)
        if refused is not None:  # failed now, no child: the app's key may not start it
            failed = {**base, "status": "failed", "endedAt": at, "error": refused.to_api()}
            return NewWait(ahead=(NewStep(run.id, wait.step_id, failed),))
        return NewWait(launch=Launch((step, _child_item(run, child_id, wait, at))))
    return NewWait()  # callbacks and retries exist already


def _child_app(parent: Run, wait: Wait) -> tuple[str, str | None]:
    """The child's app (id, name): the parent's, or the project's app `wait.app` names.

    An app of another project is never found (the lookup is within the parent's project).
    An app that does not exist (deleted meanwhile) still gets its child run, under an ID no
    app has (an app made later under that name must not pick it up): the invoker ends such
    a run `failed` (`workflows.app_deleted`) as any run whose app is gone, and that ends the
    parent's step the usual way."""
    if wait.app is None:
        return parent.app_id, parent.app_name
    app = registry_store.get_app(parent.project_id, wait.app)
    if app is None:
        return ids.derived_id("missing-app", parent.project_id, wait.app), wait.app
    return app.id, app.name


def _invoke_refusal(parent: Run, wait: Wait) -> RunError | None:
    """Why the parent's app may not start the child of an invoke naming another app."""
    if wait.app is None:
        return None
    target = registry_store.get_app(parent.project_id, wait.app)
    return app_authority.invoke_refusal(parent, target, wait.workflow or "")


QUEUE_WAIT_ERROR = "QueueWaitError"


def _wait_queue(run: Run, ref: str) -> tuple[str, RunError | None]:
    """The ID of the queue a message wait names (by ID or name, as every `{queueId}`), or
    the step's error: the API's answer to the same mistake, worded as `send_to_queue`'s
    step error (`<status> <code>: <message>`)."""
    try:
        return queues.find_queue(run.project_id, ref).id, None
    except (NotFound, ValidationError) as err:
        return ref, RunError("user", QUEUE_WAIT_ERROR, f"{err.status} {err.code}: {err}")


def _child_item(parent: Run, child_id: str, wait: Wait, at: str) -> NewItem:
    """The child run's item (a large input stored first, under the child's payloads)."""
    app_id, app_name = _child_app(parent, wait)
    text = validation.encode_value(wait.input, "input")
    large = not run_writes.inline(text)
    if large:
        payloads.put(parent.project_id, child_id, payloads.RUN_INPUT_PATH, text)
    child = Run(
        id=child_id,
        org_id=parent.org_id,
        project_id=parent.project_id,
        app_id=app_id,
        app_name=app_name,
        workflow=wait.workflow or "",
        status="running",
        input=wait.input,
        input_ref=payloads.RUN_INPUT_PATH if large else None,
        attempt=1,
        created_at=at,
        started_at=at,
        version=1,
        parent_run_id=parent.id,
        parent_step_id=wait.step_id,
    )
    return NewItem(items.run_values(child, started_event=ids.time_ordered_id()))


def end_wait_actions(
    run_id: str,
    attempt: int,
    step_id: str,
    *,
    status: str = "completed",
    output: Any = None,
    error: RunError | None = None,
    kind: str | None = None,
    project_id: str | None = None,
) -> list[Intent]:
    """End a `waiting` step (of `kind`, if given) with an output or an error; bump the run.
    A large output goes to the run's payloads (`project_id` needed)."""
    at = clock.iso(clock.now())
    sets: dict[str, Any] = {"status": status, "endedAt": at}
    if error is not None:
        sets["error"] = error.to_api()
    else:
        text = validation.encode_value(output, "output")
        if project_id and not run_writes.inline(text):
            path = payloads.step_output_path(step_id, ids.time_ordered_id())
            runs_store.put_payload(project_id, run_id, path, text)
            sets["outputRef"] = path
        else:
            sets["output"] = text
    when, values = "#status = :waiting", {":waiting": "waiting"}
    if kind is not None:
        when, values = when + " AND #kind = :kind", {**values, ":kind": kind}
    event_type = "step.completed" if status == "completed" else f"step.{status}"
    return [
        ws.step_update(
            run_id, step_id, sets=sets, when=when, when_values=values, remove=("wakeAt",)
        ),
        ws.bump_run(run_id),
        NewEvent(
            run_id,
            attempt,
            event_type,
            at,
            _expires(),
            ids.time_ordered_id(),
            {"stepId": step_id, "error": error.to_api() if error else None},
        ),
    ]


MESSAGE_SEEN_PREFIX = "MSG#"


def _message_seen_put(run_id: str, message_id: str) -> NewItem:
    """The marker `RUN#<runId>` / `MSG#<messageId>` a resume writes (only if new): a
    message resumes at most one wait of a run, however often SQS delivers it."""
    values = {
        "pk": items.run_pk(run_id),
        "sk": MESSAGE_SEEN_PREFIX + message_id,
        "type": "msgseen",
        "ttl": _expires(),
    }
    return ws.plain_put(values)


def _waits_for(waiter: dict[str, Any], app_id: str, workflow: str) -> bool:
    """Whether a waiter index item is a wait of `app_id`'s `workflow` (an item written before
    waiters recorded it: its run says)."""
    if "appId" in waiter:
        return (waiter["appId"], waiter.get("workflow")) == (app_id, workflow)
    run = runs_store.get_run(str(waiter["runId"]), with_steps=False)
    return run is not None and (run.app_id, run.workflow) == (app_id, workflow)


def resume_message_waiters(
    project_id: str, queue_id: str, key: str, message: dict, *, app_id: str, workflow: str
) -> int:
    """Complete every step of a run of `app_id`'s `workflow` (the resume subscription's
    target: seed 004, "every run of the app waiting on that queue and key") waiting on
    (queue_id, key) with `message`, each in its own transaction with its run's `invokeSeq`
    bump; answer how many were resumed (counting runs this message resumed already: a
    redelivery, acknowledged, not resumed again). Another app's waits on the same queue and
    key are not this subscription's: they wait for their own. A message with a `messageId`
    resumes at most one wait per run."""
    resumed = 0
    message_id = message.get("messageId") if isinstance(message, dict) else None
    for waiter in ws.query_pk(ws.msgwait_pk(project_id, queue_id, key)):
        if not _waits_for(waiter, app_id, workflow):
            continue
        run_id, step_id = str(waiter["runId"]), str(waiter["stepId"])
        actions = end_wait_actions(
            run_id, 1, step_id, output=message, kind="message", project_id=project_id
        )
        actions.append(ws.delete(waiter["pk"], waiter["sk"]))
        if message_id is not None:
            actions.append(_message_seen_put(run_id, str(message_id)))
        if ws.transact(actions):
            resumed += 1
        elif message_id is not None and ws.get(
            items.run_pk(run_id), MESSAGE_SEEN_PREFIX + str(message_id)
        ):
            resumed += 1  # a redelivery of a message this run took: its next wait waits on
        else:  # the wait ended otherwise (timeout, cancel) or its run ended: drop the index
            ws.transact([ws.delete(waiter["pk"], waiter["sk"])])
    return resumed


def on_run_ended(new: dict[str, Any]) -> None:
    """The stream saw a run end: a child's end ends its parent's `invoke` step, and a run's
    own running children are cancelled with it."""
    run = items.run_from(new)
    if run.parent_run_id and run.parent_step_id:
        _end_parent_step(run)
    if run.status in ("cancelled", "timedOut", "failed"):
        full = runs_store.get_run(run.id)
        for step in full.steps if full else ():
            if step.kind == "invoke" and step.child_run_id and step.status == "waiting":
                cancel_run_quietly(step.child_run_id)


def _end_parent_step(child: Run) -> None:
    if child.status == "completed":
        output = child.output
        if child.output_ref:
            output = payloads.get(child.project_id, child.id, child.output_ref)
        actions = end_wait_actions(
            child.parent_run_id or "",
            1,
            child.parent_step_id or "",
            output=output,
            kind="invoke",
            project_id=child.project_id,
        )
    elif child.status == "cancelled" and _parent_cancelling(child.parent_run_id or ""):
        # The parent's cancel cancelled the child: its wait ends as the parent's own cancel
        # op would end it, whichever of the two comes first (the child's end often does).
        actions = end_wait_actions(
            child.parent_run_id or "",
            1,
            child.parent_step_id or "",
            status="cancelled",
            error=CANCELLED_ERROR,
            kind="invoke",
        )
    else:
        inner = child.error or RunError("workflows." + child.status, "ChildRunError", "")
        code = {"cancelled": "workflows.child_cancelled"}.get(child.status, inner.code)
        error = RunError(
            code,
            inner.name if child.status != "cancelled" else "ChildRunCancelled",
            f"child run {child.id} ended {child.status}"
            + (f": {inner.message}" if inner.message else ""),
        )
        actions = end_wait_actions(
            child.parent_run_id or "",
            1,
            child.parent_step_id or "",
            status="failed",
            error=error,
            kind="invoke",
        )
    ws.transact(actions)  # refused: already ended (a repeated record) or the parent ended


def _parent_cancelling(parent_id: str) -> bool:
    """The parent is being cancelled (a `cancelling` run never goes back to `running`)."""
    parent = runs_store.get_run(parent_id, with_steps=False)
    return parent is not None and parent.status == "cancelling"


def cancel_run_quietly(run_id: str) -> None:
    run = runs_store.get_run(run_id, with_steps=False)
    if run is None or run.status != "running":
        return
    with contextlib.suppress(Conflict):  # it ended meanwhile
        control.request_cancel(run, at=clock.iso(clock.now()))


def cancel_step_actions(run: Run | None, run_id: str, step: Any) -> list[Intent]:
    """Extra writes when a pending step is cancelled: its message index item."""
    if step is not None and getattr(step, "kind", None) == "message":
        raw = ws.get(items.run_pk(run_id), items.STEP_PREFIX + step.id) or {}
        if raw.get("queueId") and raw.get("projectId"):
            pk = ws.msgwait_pk(raw["projectId"], raw["queueId"], raw.get("msgKey", ""))
            return [ws.delete(pk, f"{run_id}#{step.id}")]
    return []


def _cancelled_item(run: Run, step: Step, at: str) -> NewStep:
    """The Put of a step that was running by a `next` mark only, or launched and never
    claimed, as `cancelled`."""
    values: dict[str, Any] = {
        "name": step.name,
        "kind": step.kind,
        "status": "cancelled",
        "attempt": step.attempt,
        "order": step.order,
        "startedAt": step.started_at or at,
        "endedAt": at,
        "error": CANCELLED_ERROR.to_api(),
        "ttl": int(clock.now().timestamp()) + runs_store.CHILD_ITEM_TTL_SECONDS,
    }
    if step.launched is not None:
        values.update(branch=True, branchEpoch=0, branchLeaseUntil=0)
        values[runs_store.RUN_ATTEMPT_ATTR] = run.attempt
    return ws.step_put(run.id, step.id, values)


def cancel_leftovers(run_id: str) -> None:
    """After a run ended: pending steps become `cancelled`, message waits leave the index,
    children are cancelled. Best effort: each is its own conditional write. Nothing when
    the run is live again: a RetryRun came between the end and this cleanup, and the steps
    pending now are the new attempt's."""
    run = runs_store.get_run(run_id)
    if run is None or not run.ended:
        return
    at = run.ended_at or clock.iso(clock.now())  # as the run's view showed it since the end
    for step in run.steps:
        if step.status not in ("sleeping", "waiting", "retrying", "running"):
            continue
        if step.inline or step.launched is not None:
            # Running by a mark only, or a parallel step no branch message claimed: its
            # item, cancelled, unless it has one now (a claim then sees the run ended).
            ws.transact([_cancelled_item(run, step, at)])
            continue
        update = ws.step_update(
            run.id,
            step.id,
            sets={"status": "cancelled", "endedAt": at, "error": CANCELLED_ERROR.to_api()},
            when="#status = :was",
            when_values={":was": step.status},
            remove=("wakeAt",),
        )
        ws.transact([update, *cancel_step_actions(run, run.id, step)])
        if step.kind == "invoke" and step.child_run_id:
            cancel_run_quietly(step.child_run_id)
