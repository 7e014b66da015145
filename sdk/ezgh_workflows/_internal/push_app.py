"""`PushApp`: the HTTPS endpoint the engine calls (protocol section 1), as ASGI or Lambda."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from . import clock, protocol
from .deployment import detect_deployment_id
from .driver import Invocation
from .errors import InvocationSignal, UnknownWorkflowError, WorkflowRuleError
from .protocol import InvokeRequest, ProtocolError
from .signing import INVOCATION_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from .threads import run_in_loop_thread
from .transport import EngineBusy, TransportFactory, http_transport_factory
from .web import (
    HttpRequest,
    HttpResponse,
    Receive,
    Scope,
    Send,
    error_response,
    lambda_request,
    lambda_response,
    read_asgi_request,
    run_lifespan,
    send_asgi_response,
)
from .workflow import Workflow

logger = logging.getLogger("ezgh_workflows")

SIGNING_KEY_ENV = "EZGH_SIGNING_KEY"


@dataclass(frozen=True)
class _InvokeJob:
    workflow: Workflow
    request: InvokeRequest
    deployment_id: str | None


class PushApp:
    """Serves workflows to the engine over HTTPS.

    An ASGI 3 application (``uvicorn module:app``) and, through `lambda_handler`, an AWS
    Lambda function URL or API Gateway handler. Every ``POST`` must carry a valid
    ``X-Ezgh-Signature`` made with the app's signing key (``signing_key=``, else the
    ``EZGH_SIGNING_KEY`` environment variable); others are refused with 401. ``GET`` answers a
    short description. ``signing_key`` may be set after creation.

    ``deployment_id`` names the code being served: the engine records it with each step and
    invocation (ListRunEvents, ``ezgh workflows replay-check``). Without it,
    ``EZGH_DEPLOYMENT_ID`` or the platform's own IDs (Lambda, Vercel, Cloud Run, Fly.io,
    Render) are read at each request.
    """

    def __init__(
        self,
        workflows: Iterable[Workflow],
        *,
        signing_key: str | None = None,
        deployment_id: str | None = None,
        transport_factory: TransportFactory | None = None,
    ) -> None:
        self._workflows = _index(workflows)
        self.signing_key = (
            signing_key if signing_key is not None else os.environ.get(SIGNING_KEY_ENV)
        )
        self.deployment_id = deployment_id
        self._transport_factory = transport_factory or http_transport_factory

    @property
    def workflows(self) -> list[Workflow]:
        """The workflows this app serves."""
        return list(self._workflows.values())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI 3 entry point. Invocations run in a thread of their own, never on this loop."""
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request = await read_asgi_request(scope, receive)
        prepared = self._safe_prepare(request)
        if isinstance(prepared, _InvokeJob):
            prepared = await asyncio.wrap_future(self._start(prepared))
        await send_asgi_response(send, prepared)

    def lambda_handler(self, event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        """The AWS Lambda entry point (function URL, API Gateway HTTP API v2 or REST v1)."""
        try:
            request = lambda_request(event)
        except ValueError as exc:
            return lambda_response(error_response(400, "validation_error", str(exc)))
        prepared = self._safe_prepare(request)
        if isinstance(prepared, _InvokeJob):
            prepared = self._start(prepared).result()
        return lambda_response(prepared)

    def _safe_prepare(self, request: HttpRequest) -> HttpResponse | _InvokeJob:
        try:
            return self.prepare(request)
        except Exception as exc:
            logger.error("the SDK failed to handle a request", exc_info=exc)
            return error_response(500, "internal_error", "the SDK failed to handle the request")

    def prepare(self, request: HttpRequest) -> HttpResponse | _InvokeJob:
        """Answer a request at once, or return the invocation it asks for."""
        if request.method in ("GET", "HEAD"):
            return self._describe()
        if request.method != "POST":
            return error_response(405, "method_not_allowed", "use POST (or GET to describe)")
        problem = self._verify(request)
        if problem is not None:
            return error_response(401, "unauthorized", problem)
        try:
            body = json.loads(request.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return error_response(400, "validation_error", "the body is not JSON")
        problem = _check_invocation(body, request.headers.get(INVOCATION_HEADER, ""))
        if problem is not None:
            return error_response(401, "unauthorized", problem)
        return self._dispatch(body)

    def _verify(self, request: HttpRequest) -> str | None:
        key = self.signing_key or os.environ.get(SIGNING_KEY_ENV)
        if not key:
            return f"no signing key configured: pass signing_key= or set {SIGNING_KEY_ENV}"
        timestamp = request.headers.get(TIMESTAMP_HEADER)
        signature = request.headers.get(SIGNATURE_HEADER)
        return verify(
            key,
            timestamp,
            signature,
            request.body,
            clock.unix_seconds(),
            method=request.method,
            path=request.path,
            invocation=request.headers.get(INVOCATION_HEADER, ""),
        )

    def _dispatch(self, body: Any) -> HttpResponse | _InvokeJob:
        kind = body.get("type") if isinstance(body, dict) else None
        deployment_id = self.deployment_id or detect_deployment_id()
        if kind == "sync":
            answer = protocol.sync_answer(list(self._workflows), deployment_id)
            return HttpResponse(200, answer)
        if kind != "invoke":
            return error_response(400, "validation_error", "type must be 'sync' or 'invoke'")
        try:
            request = protocol.parse_invoke(body)
        except ProtocolError as exc:
            return error_response(400, "validation_error", str(exc))
        workflow = self._workflows.get(request.run.workflow)
        if workflow is None:
            error = UnknownWorkflowError(f"this app has no workflow {request.run.workflow!r}")
            return HttpResponse(200, protocol.failed(error.to_body(), deployment_id))
        return _InvokeJob(workflow, request, deployment_id)

    def _describe(self) -> HttpResponse:
        body = {"sdk": protocol.SDK_NAME, "protocol": protocol.PROTOCOL_VERSION}
        return HttpResponse(200, {**body, "workflows": len(self._workflows)})

    def _start(self, job: _InvokeJob) -> Future[HttpResponse]:
        return run_in_loop_thread(
            lambda: self._execute(job), name=f"ezgh-invoke:{job.request.run.id}"
        )

    async def _execute(self, job: _InvokeJob) -> HttpResponse:
        try:
            transport = self._transport_factory(job.request.api, job.deployment_id)
            invocation = Invocation(job.workflow, job.request, transport, job.deployment_id)
            return HttpResponse(200, await invocation.execute())
        except EngineBusy as exc:  # not the app's fault: the engine delivers it again later
            logger.warning("invocation of run %s: %s", job.request.run.id, exc)
            answer = protocol.throttled(str(exc), exc.retry_after, job.deployment_id)
            return HttpResponse(200, answer)
        except (Exception, InvocationSignal, WorkflowRuleError) as exc:
            logger.error("invocation of run %s failed in the SDK", job.request.run.id, exc_info=exc)
            message = f"the SDK could not complete the invocation: {type(exc).__name__}"
            return error_response(500, "internal_error", message)


def _check_invocation(body: Any, invocation: str) -> str | None:
    """The signed `X-Ezgh-Invocation` (`<invocationId>/<epoch>`) must name the invocation the
    body carries: a signature made for one invocation never delivers another."""
    if not isinstance(body, dict) or body.get("type") != "invoke":
        return None if not invocation else "X-Ezgh-Invocation on a request that is not an invoke"
    if not isinstance(body.get("invocationId"), str):
        return None  # a malformed invoke: refused as such (400) when parsed
    invocation_id, _, epoch = invocation.partition("/")
    if not invocation_id or not epoch or invocation_id != body.get("invocationId"):
        return "X-Ezgh-Invocation does not name this request's invocationId"
    return None


def _index(workflows: Iterable[Workflow]) -> dict[str, Workflow]:
    index: dict[str, Workflow] = {}
    for item in workflows:
        if not isinstance(item, Workflow):
            raise TypeError(f"{item!r} is not a workflow: decorate it with @workflow(name)")
        if item.name in index:
            raise ValueError(f"two workflows are named {item.name!r}")
        index[item.name] = item
    return index
