"""Subscriptions: a queue's deliveries to an HTTPS endpoint or a workflow.

Rules:

- One subscription per queue (SQS hands each message to one consumer, so two subscriptions
  would split a queue's messages between them); a second one is `409 invalid_state`.
- Permissions (seed 004), checked at create and at every change: `queues.subscriptions.create`
  on the queue, and for a workflow target `workflows.runs.start` (mode `start`) or
  `workflows.runs.resume` (mode `resume`) on `<app name>/<workflow>`. A subscription acts
  for the key that created it or last changed its target (`keyId` in the target; every
  change of a workflow target checks it again, so every change records it): each delivery
  reads that key again and it must still hold what creating the subscription needed
  (`service.deliver`, `service.acting_keys`). An https target acts too: it hands the queue's
  messages to a URL of its creator's choosing.
- The target's `kind` cannot change; a PATCH may change `maxConcurrency` and, within the same
  kind, the target. Pause and resume enable and disable the event source mapping.
- `maxConcurrency` 1 to 1000 (default 10). See `adapters.event_sources` for how 1 maps onto
  AWS's minimum of 2.
- An https target gets a signing secret (`whsec_<base64 of 32 random bytes>`, Standard
  Webhooks): answered once, by the create; stored sealed (AES-GCM under the engine's secret,
  bound to the subscription's ID). Deliveries are signed with it (`service.deliver`).
- A subscription is read with its queue: a key that may read the queue (a `queues.*` grant
  on it or on every queue) sees it, its status and its last failure, in a list or a read;
  a read of another is `403 forbidden`. Only a key that may manage a subscription
  (`queues.subscriptions.create` on its queue) sees an https target's URL in full; other
  readers see its scheme and host (`to_api`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from dataclasses import replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import event_sources, push, queues_store, registry_store
from ezgh_engine.config import settings
from ezgh_engine.core import sealing
from ezgh_engine.core.models import Principal
from ezgh_engine.core.queues import (
    ATTRIBUTE_NAME_RE,
    DEFAULT_MAX_CONCURRENCY,
    MAX_CONCURRENCY,
    Subscription,
)
from ezgh_engine.errors import Conflict, Forbidden, NotFound, ValidationError
from ezgh_engine.service.acting_keys import ActingKey
from ezgh_engine.service.flow_targets import check_flow_target
from ezgh_engine.service.queues import get_queue, require

CREATE_ACTION = "queues.subscriptions.create"
# An https target's URL at most (as an app's URL: `api.models`).
MAX_URL_CHARS = 2048
# What a workflow target needs on its workflow, by mode (at each change, and each delivery).
MODE_ACTION = {"start": "workflows.runs.start", "resume": "workflows.runs.resume"}


def _check_target(principal: Principal, target: dict[str, Any]) -> dict[str, Any]:
    """Validate a target and check the caller's workflow permission; its stored shape."""
    kind = target.get("kind")
    if kind == "https":
        url = target.get("url")
        if not isinstance(url, str) or not url:
            raise ValidationError("target.url: an https URL is required")
        if len(url) > MAX_URL_CHARS:  # as an app's URL: the subscription's item keeps it
            raise ValidationError(f"target.url: at most {MAX_URL_CHARS} characters")
        try:
            push.check_app_url(url)
        except ValidationError as err:
            raise ValidationError(f"target.url: {err.message}") from None
        return {"kind": "https", "url": url, "keyId": principal.key_id}
    if kind == "flow":  # an EzFlow graph's jobs
        return check_flow_target(principal, target)
    if kind != "workflow":
        raise ValidationError("target.kind: 'https', 'workflow' or 'flow'")
    mode = target.get("mode", "start")
    if mode not in MODE_ACTION:
        raise ValidationError("target.mode: 'start' or 'resume'")
    app_ref, workflow = target.get("appId"), target.get("workflow")
    if not isinstance(app_ref, str) or not app_ref:
        raise ValidationError("target.appId: the app's ID is required")
    if not isinstance(workflow, str) or not workflow:
        raise ValidationError("target.workflow: the workflow's name is required")
    app = registry_store.get_app(principal.project_id, app_ref)
    if app is None:
        raise NotFound(f"app {app_ref} not found")
    # A pending app has no workflow list yet: starts are refused and retried until it syncs.
    if app.status == "synced" and workflow not in app.workflows:
        raise NotFound(f"workflow {workflow} not found in app {app.name}")
    require(principal, MODE_ACTION[mode], f"{app.name}/{workflow}")
    stored: dict[str, Any] = {
        "kind": "workflow",
        "mode": mode,
        "appId": app.id,
        "workflow": workflow,
        "keyId": principal.key_id,  # whose authority its deliveries act with
    }
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


SECRET_PREFIX = "whsec_"


def _secret_key() -> bytes:
    return sealing.derive_key(settings().token_secret, "subscription-secret")


def _seal_secret(sub_id: str, secret: str) -> str:
    nonce = sealing.nonce_from(ids.secret_token(16))
    sealed = sealing.seal(_secret_key(), secret.encode(), f"SUB#{sub_id}".encode(), nonce)
    return base64.b64encode(sealed).decode()


def new_secret() -> str:
    """`whsec_<base64 of 32 random bytes>`, the Standard Webhooks form of a secret."""
    key = hashlib.sha256(ids.secret_token(32).encode()).digest()  # 256 random bits
    return SECRET_PREFIX + base64.b64encode(key).decode()


def signing_secret(sub: Subscription) -> str | None:
    """The subscription's `whsec_` secret in clear (None: not an https target, or created
    before deliveries were signed, or sealed under a rotated engine secret)."""
    if not sub.sealed_secret:
        return None
    plain = sealing.unseal(
        _secret_key(), base64.b64decode(sub.sealed_secret), f"SUB#{sub.id}".encode()
    )
    return plain.decode() if plain is not None else None


def acting_key(sub: Subscription) -> ActingKey:
    """The key the subscription's deliveries act for (none recorded: made before targets
    recorded one)."""
    key_id = sub.target.get("keyId")
    return ActingKey(sub.project_id, key_id if isinstance(key_id, str) else None,
                     f"subscription {sub.id}")  # fmt: skip


def to_api(principal: Principal, sub: Subscription) -> dict[str, Any]:
    """The subscription as `principal` may see it: an https target's full URL only for a key
    that may manage the subscription."""
    return sub.to_api(show_url=principal.allows(CREATE_ACTION, sub.queue_id))


def _check_concurrency(value: int | None) -> int:
    concurrency = DEFAULT_MAX_CONCURRENCY if value is None else value
    if isinstance(concurrency, bool) or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValidationError(f"maxConcurrency: from 1 to {MAX_CONCURRENCY}")
    return concurrency


def create_subscription(
    principal: Principal, *, queue_ref: str, target: dict[str, Any], max_concurrency: int | None
) -> Subscription:
    queue = get_queue(principal, queue_ref)
    require(principal, CREATE_ACTION, queue.id)
    stored = _check_target(principal, target)
    concurrency = _check_concurrency(max_concurrency)
    if queues_store.subscription_for_queue(queue.id) is not None:
        raise Conflict(
            f"queue {queue.name} already has a subscription; change or delete it",
            code="invalid_state",
        )
    sources = event_sources.event_sources()
    mapping_id = sources.create(
        queue_arn=queue.arn, queue_url=queue.url, max_concurrency=concurrency, enabled=False
    )
    sub_id = ids.new_id()
    secret = new_secret() if stored["kind"] == "https" else None
    sub = Subscription(
        id=sub_id,
        org_id=principal.org_id,
        project_id=principal.project_id,
        queue_id=queue.id,
        target=stored,
        max_concurrency=concurrency,
        paused=False,
        mapping_id=mapping_id,
        created_at=clock.iso(clock.now()),
        sealed_secret=_seal_secret(sub_id, secret) if secret else None,
    )
    try:
        queues_store.create_subscription(sub)
    except BaseException:
        with contextlib.suppress(Exception):
            sources.delete(mapping_id)
        raise
    # Enabled only once the record exists: the first delivery must find its subscription.
    sources.update(mapping_id, enabled=True)
    return sub


def get_subscription(principal: Principal, sub_id: str) -> Subscription:
    sub = queues_store.get_subscription(principal.project_id, sub_id)
    if sub is None:
        raise NotFound(f"subscription {sub_id} not found")
    return sub


def read_subscription(principal: Principal, sub_id: str) -> Subscription:
    """`GET /subscriptions/{id}`: the subscription, if the key may read its queue."""
    sub = get_subscription(principal, sub_id)
    if not principal.sees("queue", sub.queue_id):
        raise Forbidden(f"this API key holds no grant on queue {sub.queue_id}")
    return sub


def list_subscriptions(principal: Principal, queue_ref: str | None = None) -> list[Subscription]:
    """The subscriptions of the queues the key may read (of one queue, with `queue_ref`)."""
    subs = queues_store.list_subscriptions(principal.project_id)
    if queue_ref is not None:
        queue = get_queue(principal, queue_ref)
        subs = [s for s in subs if s.queue_id == queue.id]
    return [s for s in subs if principal.sees("queue", s.queue_id)]


def _require_change(principal: Principal, sub: Subscription) -> None:
    require(principal, CREATE_ACTION, sub.queue_id)


def update_subscription(
    principal: Principal,
    sub_id: str,
    *,
    target: dict[str, Any] | None = None,
    max_concurrency: int | None = None,
) -> Subscription:
    sub = get_subscription(principal, sub_id)
    _require_change(principal, sub)
    new_target = sub.target
    if target is not None:
        if target.get("kind") != sub.target.get("kind"):
            raise ValidationError("target.kind: a subscription's target kind can't change")
        merged = {**sub.target, **target}
        if merged.get("mode") != "resume" and "correlationAttribute" not in target:
            merged.pop("correlationAttribute", None)
        new_target = _check_target(principal, merged)
    elif sub.target.get("kind") == "workflow":
        # The seed: checked on every change; so it acts for the key that changed it last.
        new_target = _check_target(principal, dict(sub.target))
    concurrency = (
        sub.max_concurrency if max_concurrency is None else _check_concurrency(max_concurrency)
    )
    changed = replace(sub, target=new_target, max_concurrency=concurrency)
    if changed == sub:
        return sub
    saved = queues_store.save_subscription(changed)
    if concurrency != sub.max_concurrency:
        event_sources.event_sources().update(sub.mapping_id, max_concurrency=concurrency)
    return saved


def set_paused(principal: Principal, sub_id: str, paused: bool) -> Subscription:
    sub = get_subscription(principal, sub_id)
    _require_change(principal, sub)
    if sub.paused == paused:
        return sub
    saved = queues_store.save_subscription(replace(sub, paused=paused))
    event_sources.event_sources().update(sub.mapping_id, enabled=not paused)
    return saved


def delete_subscription(principal: Principal, sub_id: str) -> None:
    sub = get_subscription(principal, sub_id)
    _require_change(principal, sub)
    event_sources.event_sources().delete(sub.mapping_id)
    queues_store.delete_subscription(sub)
