"""Routes for EZGH Queues: queues, messages, redrive and subscriptions (under the prefix).

Request models live here (not in `api.models`) to keep the queues API in one place.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, Field

from ezgh_engine.api import models as m
from ezgh_engine.api import pages
from ezgh_engine.api.auth import principal_for
from ezgh_engine.api.idempotency import Answer, answer_once
from ezgh_engine.api.models import PageCursor
from ezgh_engine.api.responses import json_response, no_content
from ezgh_engine.core.models import Principal
from ezgh_engine.service import queues, subscriptions

router = APIGatewayHttpRouter()

PREFIX = "/v1/organizations/<orgId>/projects/<projectId>"
IdempotencyKey = Annotated[
    str | None, Header(alias="idempotency-key", description="replays the first answer for 48 h")
]


# --- models --------------------------------------------------------------------------------


class CreateQueueRequest(BaseModel):
    name: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,64}$", description="^[a-z0-9-]{1,64}$")]
    fifo: bool = False
    maxReceiveCount: Annotated[int, Field(ge=1, le=1000)] | None = None
    visibilityTimeoutSeconds: Annotated[int, Field(ge=0, le=43200)] | None = None


class QueueAnswer(BaseModel):
    id: str
    name: str
    fifo: bool
    maxReceiveCount: int
    visibilityTimeoutSeconds: int
    createdAt: str


class QueueList(BaseModel):
    queues: list[QueueAnswer]
    nextCursor: str | None = None


class SendMessagesRequest(BaseModel):
    messages: Annotated[
        list[Any],
        Field(
            min_length=1,
            max_length=10,
            description="1 to 10 of {body: string, attributes?: {string: string}, "
            "groupId?, dedupId?}",
        ),
    ]


class SentMessage(BaseModel):
    messageId: str
    seq: str | None = None


class SendMessagesAnswer(BaseModel):
    messages: list[SentMessage]


class RedriveAnswer(BaseModel):
    moved: int
    remaining: int


class TargetBody(BaseModel):
    kind: Literal["https", "workflow", "flow"]
    url: str | None = None
    mode: Literal["start", "resume"] | None = None
    appId: str | None = None
    workflow: str | None = None
    flowId: str | None = None  # kind "flow": an EzFlow graph workflow
    correlationAttribute: str | None = None


class CreateSubscriptionRequest(BaseModel):
    queueId: Annotated[str, Field(min_length=1, max_length=128, description="ID or name")]
    target: TargetBody
    maxConcurrency: Annotated[int, Field(ge=1, le=1000)] | None = None


class UpdateSubscriptionRequest(BaseModel):
    target: TargetBody | None = None
    maxConcurrency: Annotated[int, Field(ge=1, le=1000)] | None = None


class SubscriptionAnswer(BaseModel):
    id: str
    queueId: str
    target: dict[str, Any] = Field(
        description=(
            "An https target's url is shown in full only to a key holding "
            "queues.subscriptions.create on the queue; other keys see its scheme and host, "
            "with urlRedacted: true"
        )
    )
    maxConcurrency: int
    state: Literal["active", "paused"]
    paused: bool
    status: str = Field(description="'ok', or the last failure, e.g. No run to resume (message)")
    lastFailure: dict[str, Any] | None
    createdAt: str


class CreatedSubscriptionAnswer(SubscriptionAnswer):
    secret: str | None = Field(
        default=None,
        description=(
            "An https target's signing secret (whsec_<base64>), shown in this answer only. "
            "Each delivery carries the Standard Webhooks headers webhook-id, "
            "webhook-timestamp and webhook-signature: v1,<base64 HMAC-SHA256 of "
            "'{webhook-id}.{webhook-timestamp}.{body}' keyed by the base64-decoded secret>"
        ),
    )


class SubscriptionList(BaseModel):
    subscriptions: list[SubscriptionAnswer]
    nextCursor: str | None = None


def _caller(org_id: str, project_id: str) -> Principal:
    return principal_for(router.current_event, org_id, project_id)


def _target(body: TargetBody) -> dict[str, Any]:
    return body.model_dump(exclude_none=True)


# --- queues --------------------------------------------------------------------------------


@router.post(
    f"{PREFIX}/queues",
    security=m.API_KEY,
    summary="Create a queue",
    responses=m.doc(201, QueueAnswer, "the queue"),
)
def create_queue(
    orgId: str,
    projectId: str,
    body: Annotated[CreateQueueRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)

    def run() -> Answer:
        queue = queues.create_queue(
            principal,
            name=body.name,
            fifo=body.fifo,
            max_receive_count=body.maxReceiveCount,
            visibility_timeout_seconds=body.visibilityTimeoutSeconds,
        )
        return 201, queue.to_api()

    return answer_once(
        principal, "POST /queues", idempotency_key, body.model_dump(mode="json"), run
    )


@router.get(
    f"{PREFIX}/queues",
    security=m.API_KEY,
    summary="List queues",
    description="The queues this key holds a queues.* grant on (or all, unscoped)",
    responses=m.doc(200, QueueList, "the project's queues this key may read"),
)
def list_queues(orgId: str, projectId: str, cursor: PageCursor = None) -> Response[Any]:
    principal = _caller(orgId, projectId)
    found = [q.to_api() for q in queues.list_queues(principal)]
    scope = f"queues:{principal.project_id}"
    page = pages.by_size("queues", found, lambda q: str(q["name"]), cursor=cursor, scope=scope)
    return json_response(200, page)


@router.get(
    f"{PREFIX}/queues/<queueId>",
    security=m.API_KEY,
    summary="Get a queue by ID or name",
    responses=m.doc(200, QueueAnswer, "the queue"),
)
def get_queue(orgId: str, projectId: str, queueId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    return json_response(200, queues.read_queue(principal, queueId).to_api())


@router.delete(
    f"{PREFIX}/queues/<queueId>",
    security=m.API_KEY,
    summary="Delete a queue (and its subscription)",
    responses=m.doc(204, None, "deleted"),
)
def delete_queue(orgId: str, projectId: str, queueId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    queues.delete_queue(principal, queueId)
    return no_content()


@router.post(
    f"{PREFIX}/queues/<queueId>/messages",
    security=m.API_KEY,
    summary="Send 1 to 10 messages",
    responses=m.doc(200, SendMessagesAnswer, "one entry per message, in order"),
)
def send_messages(
    orgId: str,
    projectId: str,
    queueId: str,
    body: Annotated[SendMessagesRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    queue = queues.get_queue(principal, queueId)
    queues.require(principal, queues.SEND_ACTION, queue.id)

    def run() -> Answer:
        return 200, queues.send_messages(principal, queue, body.messages)

    return answer_once(
        principal,
        f"POST /queues/{queue.id}/messages",
        idempotency_key,
        body.model_dump(mode="json"),
        run,
    )


@router.post(
    f"{PREFIX}/queues/<queueId>/redrive",
    security=m.API_KEY,
    summary="Move the dead-letter queue's messages back to the queue",
    responses=m.doc(200, RedriveAnswer, "how many moved, and how many are left"),
)
def redrive(orgId: str, projectId: str, queueId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    return json_response(200, queues.redrive(principal, queueId))


# --- subscriptions -------------------------------------------------------------------------


@router.post(
    f"{PREFIX}/subscriptions",
    security=m.API_KEY,
    summary="Subscribe an HTTPS endpoint or a workflow to a queue",
    responses=m.doc(201, CreatedSubscriptionAnswer, "the subscription, with its secret"),
)
def create_subscription(
    orgId: str,
    projectId: str,
    body: Annotated[CreateSubscriptionRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)

    def run() -> Answer:
        sub = subscriptions.create_subscription(
            principal,
            queue_ref=body.queueId,
            target=_target(body.target),
            max_concurrency=body.maxConcurrency,
        )
        secret = subscriptions.signing_secret(sub)  # https targets only; this answer only
        return 201, {**sub.to_api(), **({"secret": secret} if secret else {})}

    return answer_once(
        principal, "POST /subscriptions", idempotency_key, body.model_dump(mode="json"), run
    )


@router.get(
    f"{PREFIX}/subscriptions",
    security=m.API_KEY,
    summary="List subscriptions",
    description="The subscriptions of the queues this key may read",
    responses=m.doc(200, SubscriptionList, "the project's subscriptions this key may read"),
)
def list_subscriptions(
    orgId: str,
    projectId: str,
    queueId: Annotated[str | None, Query()] = None,
    cursor: PageCursor = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    subs = subscriptions.list_subscriptions(principal, queueId)
    found = [subscriptions.to_api(principal, s) for s in subs]
    scope = f"subscriptions:{principal.project_id}:{queueId or ''}"
    page = pages.by_size("subscriptions", found, _created, cursor=cursor, scope=scope)
    return json_response(200, page)


def _created(sub: dict[str, Any]) -> str:
    """The subscriptions' order (oldest first, as the store's index sorts them)."""
    return f"{sub['createdAt']}#{sub['id']}"


@router.get(
    f"{PREFIX}/subscriptions/<subId>",
    security=m.API_KEY,
    summary="Get a subscription",
    responses=m.doc(200, SubscriptionAnswer, "the subscription"),
)
def get_subscription(orgId: str, projectId: str, subId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    sub = subscriptions.read_subscription(principal, subId)
    return json_response(200, subscriptions.to_api(principal, sub))


@router.patch(
    f"{PREFIX}/subscriptions/<subId>",
    security=m.API_KEY,
    summary="Change a subscription's maxConcurrency or target (same kind)",
    responses=m.doc(200, SubscriptionAnswer, "the subscription"),
)
def update_subscription(
    orgId: str, projectId: str, subId: str, body: Annotated[UpdateSubscriptionRequest, Body()]
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    sub = subscriptions.update_subscription(
        principal,
        subId,
        target=_target(body.target) if body.target is not None else None,
        max_concurrency=body.maxConcurrency,
    )
    return json_response(200, sub.to_api())


@router.post(
    f"{PREFIX}/subscriptions/<subId>/pause",
    security=m.API_KEY,
    summary="Pause deliveries",
    responses=m.doc(200, SubscriptionAnswer, "the subscription"),
)
def pause_subscription(orgId: str, projectId: str, subId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    return json_response(200, subscriptions.set_paused(principal, subId, True).to_api())


@router.post(
    f"{PREFIX}/subscriptions/<subId>/resume",
    security=m.API_KEY,
    summary="Resume deliveries",
    responses=m.doc(200, SubscriptionAnswer, "the subscription"),
)
def resume_subscription(orgId: str, projectId: str, subId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    return json_response(200, subscriptions.set_paused(principal, subId, False).to_api())


@router.delete(
    f"{PREFIX}/subscriptions/<subId>",
    security=m.API_KEY,
    summary="Delete a subscription",
    responses=m.doc(204, None, "deleted"),
)
def delete_subscription(orgId: str, projectId: str, subId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    subscriptions.delete_subscription(principal, subId)
    return no_content()
