"""A fake engine for SDK tests: records step ops in memory and drives a PushApp.

It implements the SDK's `StepTransport` interface (no network), signs requests like the
engine does, and plays invocations until the run ends, firing sleeps in between.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from typing import Any

import httpx
from ezgh_workflows import PushApp, Workflow
from ezgh_workflows._internal import signing
from ezgh_workflows._internal.protocol import ApiInfo

KEY = "test-signing-key"
ENDED = {"completed", "failed", "cancelled"}


class FakeEngine:
    """In-memory step records with the protocol's op semantics (section 2)."""

    def __init__(self) -> None:
        self.steps: dict[str, dict[str, Any]] = {}
        self.calls: list[list[dict[str, Any]]] = []
        self.deployment_ids: list[str | None] = []
        self.conflict = False
        self.status = "running"  # the run's status in invoke requests ("cancelling")
        self.protocol = "1.3"  # the version the fake speaks ("1.2": no ops in answers)

    # StepTransport factory -------------------------------------------------------------
    def transport(self, api: ApiInfo, deployment_id: str | None) -> FakeTransport:
        return FakeTransport(self, deployment_id)

    def apply_call(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One step call's results, in order (protocol 2.1: a new step's `start` right after
        an end in the same call is answered `inline`, as the engine does)."""
        results: list[dict[str, Any]] = []
        for op in ops:
            new = op["op"] == "start" and op["stepId"] not in self.steps
            result = self.apply(op)
            after_end = bool(results) and ops[len(results) - 1]["op"] in ("complete", "fail")
            if new and after_end and results[-1]["result"] == "ok":
                result["inline"] = {
                    "name": op["name"],
                    "order": f"00000000-0000-4000-8000-{len(self.steps):012d}",
                    "startedAt": "2026-01-01T00:00:00.000Z",
                }
            results.append(result)
        return results

    def apply(self, op: dict[str, Any]) -> dict[str, Any]:
        step_id = op["stepId"]
        step = self.steps.get(step_id)
        if step is not None and step["status"] in ENDED:
            return {"stepId": step_id, "result": "recorded", "step": copy.deepcopy(step)}
        if op["op"] == "start":
            attempt = step["attempt"] + 1 if step else 1
            self.steps[step_id] = _step(op, "run", "running", attempt)
            if step and step.get("branch"):
                self.steps[step_id]["branch"] = True
            return {"stepId": step_id, "result": "started", "attempt": attempt}
        if op["op"] == "callback":
            url = f"http://engine.invalid/v1/callbacks/tok-{step_id}"
            self.steps[step_id] = {**_step(op, "callback", "waiting", 1), "url": url}
            return {"stepId": step_id, "result": "ok", "url": url}
        if op["op"] in ("cancel", "reject"):
            kind = step["kind"] if step else op["kind"]
            status = "cancelled" if op["op"] == "cancel" else "failed"
            error = op.get("error") or {
                "code": "workflows.cancelled",
                "name": "RunCancelledError",
                "message": "the run was cancelled",
            }
            self.steps[step_id] = {**(step or {}), **_step(op, kind, status, 1), "error": error}
            return {"stepId": step_id, "result": "ok"}
        if op["op"] == "record":
            self.steps[step_id] = {**_step(op, "value", "completed", 1), "output": op["output"]}
            return {"stepId": step_id, "result": "ok"}
        assert step is not None, f"{op['op']} of a step never started"
        if op["op"] == "complete":
            step.update(status="completed", output=op["output"])
        elif op.get("retryable") and op["attempt"] <= op["retries"]:
            step.update(status="retrying", error=op["error"], wakeAt="2030-01-01T00:00:00.000Z")
            return {"stepId": step_id, "result": "retry", "retryAt": step["wakeAt"]}
        else:
            step.update(status="failed", error=op["error"])
        return {"stepId": step_id, "result": "ok"}

    # invocations -----------------------------------------------------------------------
    def invoke_body(
        self, workflow: str, input: Any = None, attempt: int = 1, branch: str | None = None
    ) -> dict[str, Any]:
        body = {
            "protocol": self.protocol,
            "type": "invoke",
            "invocationId": f"inv-{len(self.calls)}",
            "run": {
                "id": "run-1",
                "appId": "app-1",
                "workflow": workflow,
                "input": input,
                "attempt": attempt,
                "status": self.status,
            },
            "steps": [copy.deepcopy(s) for s in self.steps.values()],
            "api": {"url": "http://engine.invalid", "token": "tok"},
        }
        if branch is not None:
            body["branch"] = {"stepId": branch}
        return body

    def apply_answer_ops(self, outcome: dict[str, Any]) -> None:
        """The step ends an answer carries (1.3), applied before its outcome, as one call."""
        ops = outcome.get("ops")
        if ops:
            assert outcome["outcome"] not in ("aborted", "branch"), outcome
            self.calls.append(copy.deepcopy(ops))
            for op in ops:
                result = self.apply(op)
                assert result["result"] == "ok", (op, result)

    def note_waits(self, outcome: dict[str, Any]) -> None:
        for wait in outcome.get("waits", []):
            if wait["stepId"] in self.steps:
                continue  # callbacks and retries exist already
            step = {"id": wait["stepId"], "name": wait["name"], "kind": wait["kind"], "attempt": 1}
            if wait.get("parallel"):
                step.update(status="waiting", branch=True, attempt=0)
            else:
                step["status"] = "sleeping" if wait["kind"] == "sleep" else "waiting"
            self.steps[wait["stepId"]] = step

    def fire_timers(self) -> None:
        for step in self.steps.values():
            if step["status"] == "sleeping":
                step.update(status="completed", output=None)
            elif step["status"] == "retrying":
                step.pop("wakeAt", None)
                if step.get("branch"):
                    step["status"] = "waiting"

    def branches(self) -> list[str]:
        """Branch steps waiting for their invocation."""
        return [i for i, s in self.steps.items() if s.get("branch") and s["status"] == "waiting"]

    def ops(self, kind: str) -> list[dict[str, Any]]:
        return [op for call in self.calls for op in call if op["op"] == kind]


def _step(op: dict[str, Any], kind: str, status: str, attempt: int) -> dict[str, Any]:
    return {
        "id": op["stepId"],
        "name": op["name"],
        "kind": kind,
        "status": status,
        "attempt": attempt,
    }


class FakeTransport:
    def __init__(self, engine: FakeEngine, deployment_id: str | None) -> None:
        self.engine = engine
        self.deployment_id = deployment_id

    async def send(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        json.dumps(ops, allow_nan=False)  # every op must be JSON
        self.engine.calls.append(copy.deepcopy(ops))
        self.engine.deployment_ids.append(self.deployment_id)
        if self.engine.conflict:
            from ezgh_workflows._internal.errors import AbortInvocation

            raise AbortInvocation("409 invalid_state: lease lost")
        return self.engine.apply_call(ops)

    async def aclose(self) -> None:
        return None


def signed_headers(
    body: bytes, key: str = KEY, timestamp: int | None = None, path: str = "/"
) -> dict[str, str]:
    """The headers the engine sends (protocol 1.4: both signature forms, and the invocation
    an invoke body delivers, at epoch 1)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    invocation = ""
    if isinstance(payload, dict) and payload.get("type") == "invoke":
        invocation = f"{payload.get('invocationId')}/1"
    headers = signing.signed_headers(key, ts, body, path=path, invocation=invocation)
    return {"content-type": "application/json", **headers}


async def _post(app: PushApp, body: bytes, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        return await client.post("/", content=body, headers=headers)


def post(app: PushApp, payload: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST a JSON payload to the app through ASGI, signed unless headers are given."""
    body = json.dumps(payload).encode()
    return asyncio.run(_post(app, body, signed_headers(body) if headers is None else headers))


def make_app(engine: FakeEngine, *workflows: Workflow) -> PushApp:
    return PushApp(list(workflows), signing_key=KEY, transport_factory=engine.transport)


def invoke(
    app: PushApp, engine: FakeEngine, workflow: str, input: Any = None, branch: str | None = None
) -> dict[str, Any]:
    """One invocation (a branch invocation with `branch`); its outcome body."""
    answer = post(app, engine.invoke_body(workflow, input, branch=branch))
    assert answer.status_code == 200, answer.text
    outcome: dict[str, Any] = answer.json()
    assert outcome["protocol"] == "1.4"
    engine.apply_answer_ops(outcome)
    engine.note_waits(outcome)
    return outcome


def run_to_end(
    app: PushApp, engine: FakeEngine, workflow: str, input: Any = None, limit: int = 20
) -> tuple[dict[str, Any], int]:
    """Invoke until the run ends, firing timers; (final outcome, number of invocations)."""
    for count in range(1, limit + 1):
        outcome = invoke(app, engine, workflow, input)
        if outcome["outcome"] != "suspended":
            return outcome, count
        for step_id in engine.branches():
            assert invoke(app, engine, workflow, input, branch=step_id)["outcome"] == "branch"
        engine.fire_timers()
    raise AssertionError("the run did not end")
