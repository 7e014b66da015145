"""Pydantic models of the HTTP API's bodies: they validate requests and describe answers in
the OpenAPI document. Field names are the contract's (camelCase).

Unknown request fields are ignored (not refused), so clients written against a newer
version of the hosted API keep working.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field

from ezgh_engine.core.validation import MAX_DEPTH

AppName = Annotated[str, Field(pattern=r"^[a-z0-9-]{1,64}$", description="^[a-z0-9-]{1,64}$")]
WorkflowName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
RunKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9._:-]{1,128}$")]
# A list answered whole before answers had a size: it pages by size (`api.pages`).
PageCursor = Annotated[
    str | None,
    Query(max_length=4096, description="the nextCursor of the page before (pages by size)"),
]
RunStatus = Literal["running", "cancelling", "completed", "failed", "cancelled", "timedOut"]
NotifyOn = Literal["completed", "failed", "cancelled", "timedOut"]


# --- requests ------------------------------------------------------------------------------


class CreateAppRequest(BaseModel):
    name: AppName
    kind: Literal["push", "pull"]
    url: Annotated[str, Field(min_length=1, max_length=2048)] | None = None


class NotificationsBody(BaseModel):
    queueId: Annotated[str, Field(min_length=1, max_length=256)]
    on: Annotated[list[NotifyOn], Field(min_length=1)]
    workflows: list[WorkflowName] | None = None
    groupBy: Literal["run", "workflow"] = "run"


class UpdateAppRequest(BaseModel):
    """Only the fields present change; `notifications: null` turns notifications off."""

    url: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    notifications: NotificationsBody | None = None


class PermissionBody(BaseModel):
    action: Annotated[str, Field(min_length=1, max_length=128)]
    resource: Annotated[str, Field(min_length=1, max_length=256)] | None = None


class CreateApiKeyRequest(BaseModel):
    name: Annotated[str, Field(min_length=1, max_length=128)]
    permissions: Annotated[list[PermissionBody], Field(max_length=100)]


class StartRunRequest(BaseModel):
    appId: Annotated[str, Field(min_length=1, max_length=128, description="UUID or wfa_ slug")]
    workflow: WorkflowName
    input: Any = Field(
        default=None,
        description=(
            f"any JSON value up to 1 MiB, nested at most {MAX_DEPTH} levels, without lone "
            "surrogates (else 400 validation_error)"
        ),
    )
    runKey: RunKey | None = None
    timeoutSeconds: Annotated[int, Field(ge=1, le=365 * 24 * 3600)] | None = None


# --- answers (documentation; routes answer dicts built by the core models) ------------------


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorAnswer(BaseModel):
    error: ErrorDetail


class Notifications(BaseModel):
    queueId: str
    on: list[NotifyOn]
    workflows: list[str] | None
    groupBy: Literal["run", "workflow"]


class AppAnswer(BaseModel):
    id: str
    slug: str
    name: str
    kind: Literal["push", "pull"]
    url: str | None
    status: Literal["pending", "synced"]
    workflows: list[str]
    notifications: Notifications | None
    createdAt: str


class CreatedAppAnswer(AppAnswer):
    signingKey: str = Field(description="shown in this answer only")


class AppList(BaseModel):
    apps: list[AppAnswer]
    nextCursor: str | None = None


class Permission(BaseModel):
    action: str
    resource: str | None = None


class ApiKeyAnswer(BaseModel):
    id: str
    name: str
    permissions: list[Permission]
    createdAt: str
    createdBy: str | None = Field(
        default=None,
        description="the key that minted it (revoking that key revokes this one); null for a "
        "bootstrap key",
    )


class CreatedApiKeyAnswer(ApiKeyAnswer):
    key: str = Field(description="the secret, shown in this answer only")


class ApiKeyList(BaseModel):
    apiKeys: list[ApiKeyAnswer]
    nextCursor: str | None = None


class RunError(BaseModel):
    code: str
    name: str
    message: str


class FireError(BaseModel):
    """Why a schedule's last fire started nothing (the key it acts for revoked or narrowed,
    its app not synced, …); gone once a later fire starts its run, or the schedule changes."""

    message: str
    at: str


class StepAnswer(BaseModel):
    id: str
    name: str
    kind: Literal["run", "sleep", "value", "callback", "invoke", "message"]
    status: str
    attempt: int
    startedAt: str | None = None
    endedAt: str | None = None
    output: Any = None
    outputRef: str | None = None
    error: RunError | None = None
    childRunId: str | None = None  # an `invoke` step's child run
    # A waiting `callback` step's URL, shown to a key with `workflows.runs.resume` on the run
    # (who holds the URL may complete the callback).
    url: str | None = None


class RunAnswer(BaseModel):
    """A value that does not fit the answer (Lambda's 6 MB) is a reference read with
    GetPayload: `inputRef` instead of `input`, `outputRef` instead of `output`."""

    id: str
    appId: str
    workflow: str
    status: RunStatus
    input: Any = None
    inputRef: str | None = None
    output: Any = None
    outputRef: str | None = None
    error: RunError | None = None
    runKey: str | None = None
    attempt: int
    parentRunId: str | None = None
    scheduleId: str | None = None
    createdAt: str
    startedAt: str
    endedAt: str | None = None
    steps: list[StepAnswer] | None = None
    nextStepsCursor: str | None = Field(
        default=None,
        description="GetRun: more steps follow; pass it as stepsCursor for the next ones",
    )


class RunList(BaseModel):
    runs: list[RunAnswer]
    nextCursor: str | None


class EventList(BaseModel):
    events: list[dict[str, Any]]
    nextCursor: str | None


class Health(BaseModel):
    status: Literal["ok"]


# OpenAPI security requirements (schemes declared in `api.app`).
API_KEY: list[dict[str, list[str]]] = [{"apiKey": []}]
INVOCATION_TOKEN: list[dict[str, list[str]]] = [{"invocationToken": []}]


def doc(status: int, model: type[BaseModel] | None, description: str) -> dict[int, Any]:
    """An OpenAPI `responses` entry, plus the error answer every route may give."""
    entry: dict[str, Any] = {"description": description}
    if model is not None:
        entry["content"] = {"application/json": {"model": model}}
    return {
        status: entry,
        400: {
            "description": "validation_error",
            "content": {"application/json": {"model": ErrorAnswer}},
        },
        404: {"description": "not_found", "content": {"application/json": {"model": ErrorAnswer}}},
    }
