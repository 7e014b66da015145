"""Step calls from an invocation (docs/protocol.md section 2): start, complete, fail, record."""

from __future__ import annotations

from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import payloads, runs_store
from ezgh_engine.adapters import steps_store as store
from ezgh_engine.config import settings
from ezgh_engine.core import tokens, validation
from ezgh_engine.core.models import RunError, Step
from ezgh_engine.errors import ValidationError

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
    return {"results": [context.apply(op) for op in ops]}


class _OpContext:
    def __init__(self, claims: tokens.InvocationClaims, deployment_id: str | None) -> None:
        self.claims = claims
        self.lease = store.Lease(claims.run_id, claims.epoch)
        self.deployment_id = deployment_id

    def apply(self, op: Any) -> dict[str, Any]:
        if not isinstance(op, dict):
            raise ValidationError("each op must be an object")
        step_id = validation.check_step_id(op.get("stepId"))
        kind = op.get("op")
        if kind == "start":
            return self._start(step_id, op)
        if kind in ("complete", "fail"):
            return self._finish(step_id, op)
        if kind == "record":
            return self._record(step_id, op)
        raise ValidationError("op must be one of start, complete, fail, record")

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

    def _recorded(self, step_id: str) -> dict[str, Any]:
        step = store.get_step(self.claims.run_id, step_id)
        if step is None:
            raise ValidationError(f"step {step_id} was never started")
        return {"stepId": step_id, "result": "recorded", "step": _wire_step(self.claims, step)}

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
        path = payloads.step_output_path(step_id)
        payloads.put(self.claims.project_id, self.claims.run_id, path, text)
        return None, path

    def _finish(self, step_id: str, op: dict[str, Any]) -> dict[str, Any]:
        now = clock.iso(clock.now())
        error: RunError | None = None
        text = ref = None
        if op["op"] == "fail":
            if not isinstance(op.get("error"), dict):
                raise ValidationError("fail needs an error object")
            error = RunError.from_api(op["error"])
            event = self._event("step.failed", step_id, now, error=error.to_api())
        else:
            if "output" not in op:
                raise ValidationError("complete needs an output")
            text, ref = self._store_output(step_id, op["output"])
            event = self._event("step.completed", step_id, now)
        try:
            store.finish(
                self.lease,
                step_id=step_id,
                at=now,
                output_text=text,
                output_ref=ref,
                error=error,
                event=event,
            )
        except store.AlreadyRecorded:
            return self._recorded(step_id)
        return {"stepId": step_id, "result": "ok"}

    def _record(self, step_id: str, op: dict[str, Any]) -> dict[str, Any]:
        name = validation.check_step_name(op.get("name"))
        kind = op.get("kind")
        if kind != "value":
            raise ValidationError("record is for steps of kind value")
        if "output" not in op:
            raise ValidationError("record needs an output")
        text = validation.encode_value(op["output"], "output")
        now = clock.iso(clock.now())
        try:
            store.record(
                self.lease,
                step_id=step_id,
                name=name,
                kind=kind,
                order=ids.time_ordered_id(),
                at=now,
                output_text=text,
                expires=self._expires(),
                event=self._event("step.completed", step_id, now),
            )
        except store.AlreadyRecorded:
            return self._recorded(step_id)
        return {"stepId": step_id, "result": "ok"}


def _wire_step(claims: tokens.InvocationClaims, step: Step) -> dict[str, Any]:
    """A recorded step as the invoke request shows it, large outputs read back inline."""
    body = step.to_api()
    if step.output_ref:
        body.pop("outputRef")
        body["output"] = payloads.get(claims.project_id, claims.run_id, step.output_ref)
    return body
