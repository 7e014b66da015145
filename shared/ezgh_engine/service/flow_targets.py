"""Queue subscriptions that target a flow: `{kind: "flow", mode: "start"|"resume", flowId,
correlationAttribute?}` (contract, "Flows").

- `start`: one job per message, the message as the job's input, with the job ID
  `derived_id("queue-start", project, queue, message)` (the same rule as a workflow target),
  so a redelivered message finds its job instead of starting a second. The jobs act for the
  key that created (or last changed) the subscription's target, `keyId` in the target, read
  again at every delivery (as this environment read it at most
  `api_keys_store.KEY_CACHE_SECONDS` ago) and when each node runs: a revoked key starts no
  more jobs.
- `resume`: the message's correlation attribute is the key; every job *of this flow* waiting
  on (queue, key) in a `wait.event` node is resumed with the message. None resumed is
  `No run to resume (message)`, and the message is retried, as for a workflow target. It
  acts for the key that created or last changed its target too, which must still hold
  `flows.jobs.start` on the flow (one from before targets recorded a key resumes as before).

Either needs `queues.subscriptions.create` on the queue of the key it acts for at each
delivery, as its creation did.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine.adapters import flows_store, runs_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core.flows.graph import parse_graph
from ezgh_engine.core.flows.jobs import Actor, JobInput
from ezgh_engine.core.models import Principal
from ezgh_engine.core.queues import (
    ATTRIBUTE_NAME_RE,
    MESSAGE_KEY_RE,
    NO_RUN_TO_RESUME,
    DeliveryFailed,
    Subscription,
    start_run_id,
)
from ezgh_engine.errors import EngineError, Forbidden, NotFound, ValidationError
from ezgh_engine.service.flow_authority import acting_principal, check_graph_needs
from ezgh_engine.service.flow_jobs import start_job
from ezgh_engine.service.flows import require
from ezgh_engine.service.waits import end_wait_actions

MODE_ACTION = {"start": "flows.jobs.start", "resume": "flows.jobs.start"}
SUBSCRIBE = "queues.subscriptions.create"


def check_flow_target(principal: Principal, target: dict[str, Any]) -> dict[str, Any]:
    """Validate a flow target and the caller's permission on the flow; its stored shape."""
    mode = target.get("mode", "start")
    if mode not in MODE_ACTION:
        raise ValidationError("target.mode: 'start' or 'resume'")
    ref = target.get("flowId")
    if not isinstance(ref, str) or not ref:
        raise ValidationError("target.flowId: the flow's ID or name is required")
    flow = flows_store.get_flow(principal.project_id, ref)
    if flow is None:
        raise NotFound(f"flow {ref} not found")
    require(principal, MODE_ACTION[mode], flow.name)
    # Its deliveries act for this key (a start's jobs too), whatever the body said.
    stored: dict[str, Any] = {
        "kind": "flow",
        "mode": mode,
        "flowId": flow.id,
        "keyId": principal.key_id,
    }
    if mode == "start":
        # Its jobs will act for this key: it must be able to start them itself now.
        head = flows_store.branch_head(flow.id, flow.active_branch)
        if head is not None:
            check_graph_needs(principal, parse_graph(head.graph), who="this API key")
    attribute = target.get("correlationAttribute")
    if mode == "resume":
        if not isinstance(attribute, str) or not ATTRIBUTE_NAME_RE.match(attribute):
            raise ValidationError(
                "target.correlationAttribute: resume mode needs the message attribute that "
                "holds the key"
            )
        stored["correlationAttribute"] = attribute
    elif attribute is not None:
        raise ValidationError("target.correlationAttribute: only in resume mode")
    return stored


def deliver_start(sub: Subscription, message: dict[str, Any]) -> None:
    """Start the message's job (once per message), for the key the target records."""
    job_id = start_run_id(sub.project_id, sub.queue_id, str(message["messageId"]))
    via = f"subscription:{sub.id}"
    key_id = sub.target.get("keyId")
    actor = Actor(str(key_id), via) if isinstance(key_id, str) and key_id else None
    try:
        principal = acting_principal(sub.project_id, actor, cached=True)
        _require_queue(principal, sub)
        start_job(principal, str(sub.target["flowId"]), input=message, job_id=job_id, via=via)
    except EngineError as err:
        raise DeliveryFailed(f"Job not started: {err.status} {err.code}: {err.message}") from None


def _require_queue(principal: Principal, sub: Subscription) -> None:
    if not principal.allows(SUBSCRIBE, sub.queue_id):
        raise Forbidden(
            f"the API key {principal.key_id} subscription {sub.id} acts for may not "
            f"{SUBSCRIBE} on queue {sub.queue_id}"
        )


def _check_resume_key(sub: Subscription) -> None:
    """The key a resume target records (if any) may still subscribe the flow's jobs."""
    key_id = sub.target.get("keyId")
    if not isinstance(key_id, str) or not key_id:
        return  # a target from before targets recorded their key
    try:
        principal = acting_principal(
            sub.project_id, Actor(key_id, f"subscription:{sub.id}"), cached=True
        )
        _require_queue(principal, sub)
        flow = flows_store.get_flow_by_id(sub.project_id, str(sub.target["flowId"]))
        if flow is None:
            raise NotFound(f"flow {sub.target['flowId']} not found")
        require(principal, MODE_ACTION["resume"], flow.name)
    except EngineError as err:
        raise DeliveryFailed(f"Job not resumed: {err.status} {err.code}: {err.message}") from None


def deliver_resume(sub: Subscription, message: dict[str, Any]) -> None:
    """Resume this flow's jobs waiting on (queue, key) with the message."""
    _check_resume_key(sub)
    key = message["attributes"].get(str(sub.target["correlationAttribute"]))
    if not isinstance(key, str) or not MESSAGE_KEY_RE.match(key):
        raise DeliveryFailed(NO_RUN_TO_RESUME)
    resumed = 0
    for waiter in ws.query_pk(ws.msgwait_pk(sub.project_id, sub.queue_id, key)):
        run = runs_store.get_run(str(waiter["runId"]), with_steps=False)
        if run is None or JobInput.from_run_input(run.input).flow_id != sub.target["flowId"]:
            continue  # another flow's job, or a code workflow's run: not this target's
        actions = end_wait_actions(
            run.id,
            1,
            str(waiter["stepId"]),
            output=message,
            kind="message",
            project_id=sub.project_id,
        )
        actions.append(ws.delete(waiter["pk"], waiter["sk"]))
        if ws.transact(actions):
            resumed += 1
        else:  # the wait ended otherwise (timeout, cancel): drop the index entry
            ws.transact([ws.delete(waiter["pk"], waiter["sk"])])
    if resumed == 0:
        raise DeliveryFailed(NO_RUN_TO_RESUME)
