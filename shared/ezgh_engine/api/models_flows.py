"""Pydantic models of the Flows API (contract, "Flows"): requests validated, answers
described in the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from ezgh_engine.api import models as m

FlowName = Annotated[str, Field(pattern=r"^[a-z0-9-]{1,64}$", description="^[a-z0-9-]{1,64}$")]
Branch = Annotated[str, Field(pattern=r"^[A-Za-z0-9._/-]{1,64}$")]
JobStatus = Literal["RUNNING", "WAITING", "COMPLETED", "FAILED", "CANCELLED"]
ActionStatus = Literal["RUNNING", "WAITING", "COMPLETED", "FAILED", "SKIPPED", "CANCELLED"]


class CreateFlowRequest(BaseModel):
    name: FlowName
    description: Annotated[str, Field(max_length=2000)] | None = None


class UpdateFlowRequest(BaseModel):
    """Only the fields present change."""

    activeBranch: Branch | None = None
    description: Annotated[str, Field(max_length=2000)] | None = None


class GraphBody(BaseModel):
    """`{nodes, edges}`; the rules are checked by the validator, which names the fault."""

    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]] = []


class CommitRequest(BaseModel):
    branch: Branch = "main"
    message: Annotated[str, Field(max_length=2000)] | None = None
    graph: GraphBody


class StartJobRequest(BaseModel):
    input: Any = None
    trackingId: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    branch: Branch | None = None


class FlowAnswer(BaseModel):
    id: str
    slug: str
    name: str
    description: str | None = None
    activeBranch: str
    createdAt: str


class FlowList(BaseModel):
    flows: list[FlowAnswer]
    nextCursor: str | None = None


class CommitAnswer(BaseModel):
    id: str
    flowId: str
    branch: str
    message: str | None = None
    createdAt: str
    graph: dict[str, Any]


class CommitList(BaseModel):
    commits: list[CommitAnswer]
    nextCursor: str | None = None


class ModuleTypeAnswer(BaseModel):
    moduleType: str
    description: str
    inputs: list[str]
    outputs: list[str]
    configSchema: dict[str, Any]


class ModuleTypeList(BaseModel):
    moduleTypes: list[ModuleTypeAnswer]


class ActionAnswer(BaseModel):
    id: str
    nodeId: str
    moduleType: str
    status: ActionStatus
    input: Any = None
    # Either the value or a reference to it (a payload path: GET /jobs/{jobId}/payloads/…).
    inputRef: str | None = None
    output: Any = None
    outputRef: str | None = None
    error: dict[str, Any] | None = None
    attempt: int
    startedAt: str | None = None
    finishedAt: str | None = None
    durationMs: int | None = None
    trackingId: str
    resumeUrl: str | None = None
    childJobId: str | None = None
    childRunId: str | None = None


class JobAnswer(BaseModel):
    id: str
    flowId: str
    commitId: str
    branch: str
    status: JobStatus
    trackingId: str
    input: Any = None
    inputRef: str | None = None  # the input's payload path, when not inline
    output: Any = None
    outputRef: str | None = None  # the output's payload path, when not inline
    error: dict[str, Any] | None = None
    startedAt: str
    finishedAt: str | None = None
    durationMs: int | None = None
    parentJobId: str | None = None  # a sub-flow's job: the job that invoked it
    actions: list[ActionAnswer] = []
    # More actions than one answer holds: GET /jobs/{jobId}?actionsCursor=… gives the next.
    nextActionsCursor: str | None = None


class JobList(BaseModel):
    jobs: list[JobAnswer]
    nextCursor: str | None = None


class FailedItemAnswer(BaseModel):
    id: str
    jobId: str
    flowId: str
    nodeId: str
    moduleType: str
    input: Any = None
    error: dict[str, Any]
    attempts: int
    createdAt: str
    retriedAt: str | None = None


class FailedItemList(BaseModel):
    failedItems: list[FailedItemAnswer]
    nextCursor: str | None = None


class CreateFlowScheduleRequest(BaseModel):
    """A flow schedule: a job of the flow at each time of a 5-field cron (timezone an IANA
    name, default UTC), acting for the key that creates it."""

    cron: str
    timezone: str | None = None
    input: Any = None
    trackingId: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    branch: Branch | None = None


class FlowScheduleAnswer(BaseModel):
    id: str
    slug: str
    flowId: str
    cron: str
    timezone: str
    input: Any = None
    trackingId: str | None = None
    branch: str | None = None
    keyId: str | None = None
    status: Literal["active", "paused"]
    nextRunAt: str | None = None
    lastError: m.FireError | None = None
    createdAt: str
    updatedAt: str


class FlowScheduleList(BaseModel):
    schedules: list[FlowScheduleAnswer]
