"""Step calls from an invocation (docs/protocol.md section 2): start, complete, fail, record.

A call's ops are written in one transaction when they can be (the fast path: `start` with
the attempt the SDK expects, `complete`, `fail`, `record`); when a step's condition refuses
that write (a resent call, a step another invocation recorded), the ops are applied one by
one, each answering what is recorded. The same ops may ride an invocation's answer
(protocol 1.3, `ops`): `answer_writes` gives their writes, for the outcome's transaction
or ahead of its commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import payloads, runs_store
from ezgh_engine.adapters import steps_store as store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.config import settings
from ezgh_engine.core import retries, tokens, validation
from ezgh_engine.core.models import LIVE_STATUSES, RunError, Step
from ezgh_engine.core.protocol_rules import STEP_ENDED_STATUSES, end_differs, may_retry
from ezgh_engine.errors import Forbidden, StaleInvocation, ValidationError
from ezgh_engine.service import callbacks, waits, wire

OP_KINDS = ("start", "complete", "fail", "record", "callback", "cancel", "reject")
STEP_KINDS = ("run", "sleep", "value", "callback", "invoke", "message")

MAX_OPS = 25


def apply_ops(token: str, body: Any) -> dict[str, Any]:
    """Apply a batch of step ops for the invocation the token names; answer their results."""
    claims = tokens.verify(settings().token_secret, token, clock.now_ms())
    if not isinstance(body, dict) or not isinstance(body.get("ops"), list):
        raise ValidationError("body must be an object with an ops list")
    ops = body["ops"]
    if not 1 <= len(ops) <= MAX_OPS:
        raise ValidationError(f"ops must hold 1 to {MAX_OPS} operations")
    deployment = body.get("deploymentId")
    if deployment is not None and not isinstance(deployment, str):
        raise ValidationError("deploymentId must be a string or null")
    context = _OpContext(claims, deployment)
    return {"results": context.apply_all(ops)}


FAST_OPS = ("start", "complete", "fail", "record")
ANSWER_OPS = ("complete", "fail", "record")


def answer_writes(
    claims: tokens.InvocationClaims, deployment_id: str | None, ops: Any
) -> list[list[dict[str, Any]]]:
    """The writes of the ops an invocation's answer carries (the steps it ended since its
    last step call), one list per op (a failure is its step and its event), each under the
    step's own conditions. `ValidationError` when they are not a list of
    complete/fail/record ops on distinct steps."""
    if not isinstance(ops, list) or len(ops) > MAX_OPS:
        raise ValidationError(f"ops must be a list of at most {MAX_OPS} operations")
    context = _OpContext(claims, deployment_id)
    planned = [context.plan(op) for op in ops]
    if any(p is None or p.op not in ANSWER_OPS for p in planned):
        raise ValidationError("an answer's ops may only complete, fail or record steps")
    if len({p.step_id for p in planned if p}) != len(planned):
        raise ValidationError("an answer's ops must name distinct steps")
    return [p.actions for p in planned if p]


def check_not_taken_over(claims: tokens.InvocationClaims) -> None:
    """`StaleInvocation` when the run ended or a newer epoch holds it: the read a step call
    makes (half a read unit), before an answer's step ends are written ahead of its
    outcome's commit, whose condition is the same (its epoch, a live run). A lease that
    merely ran out, with no newer invocation, still takes its answer, as the commit does."""
    state = store.run_state(claims.run_id)
    if state is None or state[0] not in LIVE_STATUSES or state[1] != claims.epoch:
        raise StaleInvocation("the invocation's lease was taken over or the run ended")


def apply_answer_ops(
    claims: tokens.InvocationClaims, deployment_id: str | None, ops: list[Any]
) -> list[str]:
    """Apply an answer's ops one by one (after their writes in the outcome's transaction
    were refused); the IDs of the steps recorded with another outcome than the ops say.
    Raises `StaleInvocation` when the lease was lost."""
    context = _OpContext(claims, deployment_id)
    results = [context.apply(op) for op in ops]
    pairs = zip(ops, results, strict=True)
    return [op["stepId"] for op, result in pairs if end_differs(op, result)]


@dataclass(frozen=True)
class _Planned:
    """An op's writes on the fast path, and the result it answers when they commit. A
    `start` of a new step carries the `InlineStart` it becomes when it follows a step's
    end in the same call."""

    op: str
    step_id: str
    actions: list[dict[str, Any]]
    result: dict[str, Any]
    inline: store.InlineStart | None = None


class _OpContext:
    def __init__(self, claims: tokens.InvocationClaims, deployment_id: str | None) -> None:
        self.claims = claims
        self.lease = store.Lease(claims.run_id, claims.epoch, claims.step_id)
        self.deployment_id = deployment_id

    def apply_all(self, ops: list[Any]) -> list[dict[str, Any]]:
        """Every op's result: on the fast path one write for the lot (a step's end and the
        next step's start are one item write), else one by one under the run's lease."""
        planned = [self.plan(op) for op in ops]
        if self.claims.step_id is not None:
            self._check_branch_live()
        distinct = len({p.step_id for p in planned if p}) == len(planned)
        if not distinct or not all(planned):
            return [self.apply(op) for op in ops]
        writes, results = self._compose([p for p in planned if p])
        # No lease transaction: a read of the run instead, so no step starts or ends for an
        # invocation whose run ended or moved on (a pull worker's token outlives its lease).
        self._check_live()
        try:
            store.write(writes)
        except store.AlreadyRecorded:
            return [self.apply(op) for op in ops]  # let each op say what is recorded
        return results

    def _compose(
        self, planned: list[_Planned]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The writes and results of a call: a new step's start right after a step's end
        rides that end's item write (`store.with_next`), so it costs no write of its own."""
        writes: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        previous: _Planned | None = None
        for p in planned:
            ends = previous is not None and previous.op in ANSWER_OPS
            if p.inline is not None and ends and previous and previous.result["result"] != "retry":
                index = len(writes) - len(previous.actions)
                writes[index] = store.with_next(
                    writes[index],
                    step_id=p.step_id,
                    start=p.inline,
                    epoch=self.claims.epoch,
                    expires=self._expires(),
                    run_attempt=self.claims.attempt,
                )
                results.append({**p.result, "inline": p.inline.to_wire()})
            else:
                writes += p.actions
                results.append(p.result)
            previous = p
        return writes, results

    def _check_live(self) -> None:
        state = store.run_state(self.claims.run_id)
        if state is None or state[0] not in LIVE_STATUSES or state[1] > self.claims.epoch:
            raise StaleInvocation("the invocation's lease was taken over or the run ended")
        # A main invocation's token works while its lease does: once it has answered (the
        # lease released, `leaseUntil` 0) or its lease ran out, it starts and ends nothing.
        if self.claims.step_id is None and state[2] < clock.now_ms():
            raise StaleInvocation("the invocation has answered or its lease ended")

    def _check_branch_live(self) -> None:
        """A branch invocation's token works while it holds its step's branch lease: once it
        has answered (the lease released) or the lease ran out, it starts and ends nothing."""
        epoch, until = store.branch_lease(self.claims.run_id, self.claims.step_id or "")
        if epoch != self.claims.epoch or until < clock.now_ms():
            raise StaleInvocation("the branch invocation has answered or its lease ended")

    def _checked(self, op: Any) -> tuple[str, str]:
        if not isinstance(op, dict):
            raise ValidationError("each op must be an object")
        step_id = validation.check_step_id(op.get("stepId"))
        kind = op.get("op")
        if kind not in OP_KINDS:
            raise ValidationError(f"op must be one of {', '.join(OP_KINDS)}")
        if self.claims.step_id is not None and (
            step_id != self.claims.step_id or kind not in ("start", "complete", "fail")
        ):
            raise Forbidden(
                f"this branch invocation may only run step {self.claims.step_id}, not {step_id}"
            )
        return step_id, kind

    def plan(self, op: Any) -> _Planned | None:
        """The op's fast-path writes, or None when it needs the one-by-one path (a branch
        invocation's op, a start without the expected attempt, a callback, cancel, reject)."""
        step_id, kind = self._checked(op)
        if self.claims.step_id is not None or kind not in FAST_OPS:
            return None
        now = clock.iso(clock.now())
        if kind == "start":
            name = validation.check_step_name(op.get("name"))
            if op.get("kind", "run") != "run":
                raise ValidationError("start is for steps of kind run")
            attempt = op.get("attempt")
            if attempt is None:
                return None
            if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
                raise ValidationError("attempt must be an integer >= 1")
            order = ids.time_ordered_id()
            action = store.start_action(
                self.lease,
                step_id=step_id,
                name=name,
                kind="run",
                order=order,
                at=now,
                expires=self._expires(),
                attempt=attempt,
            )
            result = {"stepId": step_id, "result": "started", "attempt": attempt}
            inline = store.InlineStart(name, order, now) if attempt == 1 else None
            return _Planned(kind, step_id, [action], result, inline)
        return self._end(step_id, op, now)

    def _end(self, step_id: str, op: dict[str, Any], now: str) -> _Planned:
        """A `record`, `complete` or `fail`: its writes and the result they answer, for the
        fast path and the one-by-one path alike."""
        if op["op"] == "record":
            name, text = self._record_args(op)
            action = store.record_action(
                self.lease,
                step_id=step_id,
                name=name,
                kind="value",
                order=ids.time_ordered_id(),
                at=now,
                output_text=text,
                expires=self._expires(),
                marks=self._marks(),
            )
            return _Planned("record", step_id, [action], {"stepId": step_id, "result": "ok"})
        finish = self._finish_args(step_id, op, now)
        inline = _inline_start(op)
        if inline is not None:
            end = store.inline_end_action(
                self.lease,
                step_id=step_id,
                at=now,
                start=inline,
                expires=self._expires(),
                **finish.fields,
            )
        else:
            end = store.finish_action(self.lease, step_id=step_id, at=now, **finish.fields)
        actions = [end] if finish.event is None else [end, finish.event]
        return _Planned(op["op"], step_id, actions, finish.result)

    def apply(self, op: Any) -> dict[str, Any]:
        step_id, kind = self._checked(op)
        if kind == "start":
            return self._start(step_id, op)
        if kind in ("complete", "fail"):
            return self._finish(step_id, op)
        if kind == "record":
            return self._record(step_id, op)
        if kind == "callback":
            return self._callback(step_id, op)
        return self._cancel_or_reject(step_id, op)

    def _expires(self) -> int:
        return int(clock.now().timestamp()) + runs_store.CHILD_ITEM_TTL_SECONDS

    def _event(self, event_type: str, step_id: str, at: str, **fields: Any) -> dict[str, Any]:
        return runs_store.event_put(
            self.claims.run_id,
            self.claims.attempt,
            event_type,
            at,
            self._expires(),
            stepId=step_id,
            deploymentId=self.deployment_id,
            **fields,
        )

    def _marks(self) -> dict[str, Any]:
        """This completion as its step's own `step.completed` event (no event item)."""
        return store.event_marks(ids.time_ordered_id(), self.claims.attempt, self.deployment_id)

    def _recorded(self, step_id: str) -> dict[str, Any]:
        step = store.get_step(self.claims.run_id, step_id)
        if step is None:
            raise ValidationError(f"step {step_id} was never started")
        return {"stepId": step_id, "result": "recorded", "step": _wire_step(self.claims, step)}

    def _callback(self, step_id: str, op: dict[str, Any]) -> dict[str, Any]:
        name = validation.check_step_name(op.get("name"))
        timeout = op.get("timeoutSeconds")
        if timeout is not None and (
            not isinstance(timeout, int)
            or isinstance(timeout, bool)
            or not 1 <= timeout <= 365 * 86_400
        ):
            raise ValidationError("timeoutSeconds must be null or 1 to 31536000")
        now = clock.iso(clock.now())
        actions, url = callbacks.create_actions(
            self.claims.run_id,
            self.claims.project_id,
            step_id,
            name,
            timeout,
            order=ids.time_ordered_id(),
            at=now,
            expires=self._expires(),
        )
        try:
            store.transact(self.lease, [*actions, self._event("step.waiting", step_id, now)])
        except store.AlreadyRecorded:
            return self._recorded(step_id)
        return {"stepId": step_id, "result": "ok", "url": url}

    def _cancel_or_reject(self, step_id: str, op: dict[str, Any]) -> dict[str, Any]:
        """`cancel`: a cancelling run ends a step with the cancellation; `reject`: a step
        that can't be (a sleep over a year) fails at once. Both refuse an ended step."""
        name = validation.check_step_name(op.get("name"))
        kind = op.get("kind")
        if kind not in STEP_KINDS:
            raise ValidationError(f"kind must be one of {', '.join(STEP_KINDS)}")
        if op["op"] == "cancel":
            status, error = "cancelled", waits.CANCELLED_ERROR
        else:
            if not isinstance(op.get("error"), dict):
                raise ValidationError("reject needs an error object")
            status, error = "failed", RunError.from_api(op["error"])
        now = clock.iso(clock.now())
        existing = store.get_step(self.claims.run_id, step_id)
        sets = {"status": status, "endedAt": now, "error": error.to_api()}
        event = self._event(f"step.{status}", step_id, now, error=error.to_api())
        if existing is None:
            values = {
                **sets,
                "name": name,
                "kind": kind,
                "attempt": 1,
                "order": ids.time_ordered_id(),
                "startedAt": now,
                "ttl": self._expires(),
            }
            actions = [ws.step_put(self.claims.run_id, step_id, values)]
        elif existing.status in STEP_ENDED_STATUSES:
            return self._recorded(step_id)
        else:
            actions = [
                ws.step_update(
                    self.claims.run_id,
                    step_id,
                    sets=sets,
                    when="#status = :was",
                    when_values={":was": existing.status},
                    remove=("wakeAt",),
                ),
                *waits.cancel_step_actions(None, self.claims.run_id, existing),
            ]
        try:
            store.transact(self.lease, [*actions, event])
        except store.AlreadyRecorded:
            return self._recorded(step_id)
        if existing is not None and existing.kind == "invoke" and existing.child_run_id:
            waits.cancel_run_quietly(existing.child_run_id)
        return {"stepId": step_id, "result": "ok"}

    def _start(self, step_id: str, op: dict[str, Any]) -> dict[str, Any]:
        name = validation.check_step_name(op.get("name"))
        if op.get("kind", "run") != "run":
            raise ValidationError("start is for steps of kind run")
        now = clock.iso(clock.now())
        try:
            attempt = store.start(
                self.lease,
                step_id=step_id,
                name=name,
                kind="run",
                order=ids.time_ordered_id(),
                at=now,
                expires=self._expires(),
            )
        except store.AlreadyRecorded:
            step = store.get_step(self.claims.run_id, step_id)
            if step is not None and step.status == "running":
                return {"stepId": step_id, "result": "started", "attempt": step.attempt}
            return self._recorded(step_id)
        return {"stepId": step_id, "result": "started", "attempt": attempt}

    def _store_output(self, step_id: str, value: Any) -> tuple[str | None, str | None]:
        text = validation.encode_value(value, "output")
        if len(text.encode()) <= settings().payload_inline_bytes:
            return text, None
        # Check the invocation before the object exists: a refused late call must leave no
        # payload behind (its run may be gone, its purge run already).
        if self.claims.step_id is not None:
            self._check_branch_live()
        self._check_live()
        path = payloads.step_output_path(step_id, ids.time_ordered_id())
        runs_store.put_payload(self.claims.project_id, self.claims.run_id, path, text)
        return None, path

    def _finish_args(self, step_id: str, op: dict[str, Any], now: str) -> _Finish:
        """What a complete or fail op writes, and what it answers when written."""
        if op["op"] == "fail":
            if not isinstance(op.get("error"), dict):
                raise ValidationError("fail needs an error object")
            error = RunError.from_api(op["error"])
            retry_at, attempt = _retry_at(op)
            kind = "step.retrying" if retry_at else "step.failed"
            event = self._event(kind, step_id, now, error=error.to_api(), stepAttempt=attempt)
            fields: dict[str, Any] = {
                "output_text": None,
                "output_ref": None,
                "error": error,
                "retry_at": retry_at,
                "attempt": attempt,
            }
            if retry_at:
                return _Finish(
                    fields, event, {"stepId": step_id, "result": "retry", "retryAt": retry_at}
                )
            return _Finish(fields, event, {"stepId": step_id, "result": "ok"})
        if "output" not in op:
            raise ValidationError("complete needs an output")
        text, ref = self._store_output(step_id, op["output"])
        fields = {"output_text": text, "output_ref": ref, "error": None, "marks": self._marks()}
        return _Finish(fields, None, {"stepId": step_id, "result": "ok"})

    def _finish(self, step_id: str, op: dict[str, Any]) -> dict[str, Any]:
        now = clock.iso(clock.now())
        planned = self._end(step_id, op, now)
        retry = planned.result["result"] == "retry"
        # A branch's step that ended resumes its run: the same transaction asks for it.
        bump = self.claims.step_id is not None and not retry
        try:
            store.transact(self.lease, planned.actions, bump=bump)
        except store.AlreadyRecorded:
            step = store.get_step(self.claims.run_id, step_id)
            if step is not None and step.status == "retrying" and retry:
                # A resent retryable fail: the retry is recorded (and may be due already).
                return {"stepId": step_id, "result": "retry", "retryAt": step.wake_at or now}
            return self._recorded(step_id)
        return planned.result

    def _record_args(self, op: dict[str, Any]) -> tuple[str, str]:
        name = validation.check_step_name(op.get("name"))
        if op.get("kind") != "value":
            raise ValidationError("record is for steps of kind value")
        if "output" not in op:
            raise ValidationError("record needs an output")
        return name, validation.encode_value(op["output"], "output")

    def _record(self, step_id: str, op: dict[str, Any]) -> dict[str, Any]:
        planned = self._end(step_id, op, clock.iso(clock.now()))
        try:
            store.transact(self.lease, planned.actions)
        except store.AlreadyRecorded:
            return self._recorded(step_id)
        return planned.result


@dataclass(frozen=True)
class _Finish:
    """A complete/fail op: the `store.finish_action` arguments, its event item (failures
    only: a completion is its step's own event), and its result."""

    fields: dict[str, Any]
    event: dict[str, Any] | None
    result: dict[str, Any]


def _inline_start(op: dict[str, Any]) -> store.InlineStart | None:
    """The `inline` a step's start answered, echoed by its end op (protocol 1.3)."""
    echo = op.get("inline")
    if echo is None:
        return None
    if not isinstance(echo, dict):
        raise ValidationError("inline must be the object the step's start answered")
    name = validation.check_step_name(echo.get("name"))
    order, started = echo.get("order"), echo.get("startedAt")
    for value, field in ((order, "order"), (started, "startedAt")):
        if not isinstance(value, str) or not 1 <= len(value) <= 64:
            raise ValidationError(f"inline.{field} must be the string the start answered")
    assert isinstance(order, str) and isinstance(started, str)
    return store.InlineStart(name, order, started)


def _retry_at(op: dict[str, Any]) -> tuple[str | None, int | None]:
    """When a failed attempt runs again (None: the step fails), and the attempt's number."""
    if not op.get("retryable"):
        return None, None
    attempt, allowed = op.get("attempt"), op.get("retries")
    for value, field in ((attempt, "attempt"), (allowed, "retries")):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValidationError(f"{field} must be an integer >= 0")
    assert isinstance(attempt, int) and isinstance(allowed, int)
    if not may_retry(attempt, allowed):
        return None, attempt
    from datetime import timedelta

    delay = retries.delay_seconds(attempt, ids.random_fraction())
    return clock.iso(clock.now() + timedelta(seconds=delay)), attempt


def _wire_step(claims: tokens.InvocationClaims, step: Step) -> dict[str, Any]:
    """A recorded step as the invoke request shows it (see `service.wire`)."""
    return wire.step_body(claims.project_id, claims.run_id, step)
