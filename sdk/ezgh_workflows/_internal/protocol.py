"""Wire shapes of the invocation protocol 1.2 (docs/protocol.md): requests, outcomes, ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ErrorBody

PROTOCOL_VERSION = "1.2"
SDK_VERSION = "0.3.0"
SDK_NAME = f"ezgh-workflows-python/{SDK_VERSION}"

Json = Any
Op = dict[str, Any]


class ProtocolError(ValueError):
    """A request or an answer does not have the protocol's shape."""


@dataclass(frozen=True)
class RecordedStep:
    """A step the engine recorded, as sent in an invoke request or a ``recorded`` result."""

    id: str
    name: str
    kind: str
    status: str
    attempt: int
    output: Json = None
    error: ErrorBody | None = None


@dataclass(frozen=True)
class RunInfo:
    id: str
    app_id: str
    workflow: str
    input: Json
    attempt: int
    status: str


@dataclass(frozen=True)
class ApiInfo:
    url: str
    token: str


@dataclass(frozen=True)
class InvokeRequest:
    invocation_id: str
    run: RunInfo
    steps: tuple[RecordedStep, ...]
    api: ApiInfo


def _field(body: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(body, dict):
        raise ProtocolError(f"{where} must be an object")
    value = body.get(key)
    if not isinstance(value, kind):
        raise ProtocolError(f"{where}.{key} is missing or has the wrong type")
    return value


def parse_recorded_step(body: Any, where: str = "step") -> RecordedStep:
    error = body.get("error") if isinstance(body, dict) else None
    return RecordedStep(
        id=_field(body, "id", str, where),
        name=_field(body, "name", str, where),
        kind=_field(body, "kind", str, where),
        status=_field(body, "status", str, where),
        attempt=int(body.get("attempt") or 1),
        output=body.get("output"),
        error=error if isinstance(error, dict) else None,
    )


def parse_invoke(body: Any) -> InvokeRequest:
    """Parse an ``invoke`` request; `ProtocolError` when its shape is wrong."""
    run = _field(body, "run", dict, "request")
    api = _field(body, "api", dict, "request")
    steps = body.get("steps") or []
    if not isinstance(steps, list):
        raise ProtocolError("request.steps must be a list")
    return InvokeRequest(
        invocation_id=str(body.get("invocationId") or ""),
        run=RunInfo(
            id=_field(run, "id", str, "run"),
            app_id=str(run.get("appId") or ""),
            workflow=_field(run, "workflow", str, "run"),
            input=run.get("input"),
            attempt=int(run.get("attempt") or 1),
            status=str(run.get("status") or "running"),
        ),
        steps=tuple(parse_recorded_step(s, f"steps[{i}]") for i, s in enumerate(steps)),
        api=ApiInfo(url=_field(api, "url", str, "api"), token=_field(api, "token", str, "api")),
    )


def sync_answer(workflow_names: list[str], deployment_id: str | None) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL_VERSION,
        "sdk": SDK_NAME,
        "deploymentId": deployment_id,
        "workflows": [{"name": name} for name in workflow_names],
    }


def _outcome(kind: str, deployment_id: str | None, **fields: Any) -> dict[str, Any]:
    return {"protocol": PROTOCOL_VERSION, "deploymentId": deployment_id, "outcome": kind, **fields}


def completed(output: Json, deployment_id: str | None) -> dict[str, Any]:
    return _outcome("completed", deployment_id, output=output)


def failed(error: ErrorBody, deployment_id: str | None) -> dict[str, Any]:
    return _outcome("failed", deployment_id, error=error)


def suspended(waits: list[dict[str, Any]], deployment_id: str | None) -> dict[str, Any]:
    return _outcome("suspended", deployment_id, waits=waits)


def aborted(reason: str, deployment_id: str | None) -> dict[str, Any]:
    return _outcome("aborted", deployment_id, reason=reason)


def op_start(step_id: str, name: str) -> Op:
    return {"op": "start", "stepId": step_id, "name": name, "kind": "run"}


def op_complete(step_id: str, output: Json) -> Op:
    return {"op": "complete", "stepId": step_id, "output": output}


def op_fail(step_id: str, error: ErrorBody) -> Op:
    return {"op": "fail", "stepId": step_id, "error": error}


def op_record(step_id: str, name: str, output: Json) -> Op:
    return {"op": "record", "stepId": step_id, "name": name, "kind": "value", "output": output}


def recorded_in(result: Any) -> RecordedStep | None:
    """The recorded step of a ``recorded`` op result, ``None`` for ``started``/``ok``."""
    if not isinstance(result, dict) or "result" not in result:
        raise ProtocolError("a step call result has no 'result'")
    if result["result"] != "recorded":
        return None
    return parse_recorded_step(result.get("step"), "result.step")
