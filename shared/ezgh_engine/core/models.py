"""Immutable values of the engine's core, and their API shapes.

Pydantic models live at the edges (API bodies, wire messages); inside, these frozen
dataclasses. JSON values (inputs, outputs) are kept as Python JSON values here; the store keeps
them as JSON text (or an S3 reference when large).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

from ezgh_engine.core.grants import ALL, Grant, action_kind
from ezgh_engine.core.protocol_rules import (
    MAX_ERROR_FIELD_BYTES,
    MAX_ERROR_MESSAGE_BYTES,
    RUN_ENDED_STATUSES,
    RUN_LIVE_STATUSES,
    clip,
)

RunStatus = Literal["running", "cancelling", "completed", "failed", "cancelled", "timedOut"]
# Owned by `protocol_rules` (the SDK decides with the same sets).
ENDED_STATUSES: frozenset[str] = RUN_ENDED_STATUSES
LIVE_STATUSES: frozenset[str] = RUN_LIVE_STATUSES

StepKind = Literal["run", "sleep", "value", "callback", "invoke", "message"]
StepStatus = Literal[
    "running", "retrying", "completed", "failed", "cancelled", "sleeping", "waiting"
]
PENDING_STEP_STATUSES: frozenset[str] = frozenset({"sleeping", "waiting", "retrying"})


@dataclass(frozen=True)
class Principal:
    """Who is calling: an API key of one project, with its permissions.

    Grants are read kind-aware (`core.grants`): a check asks for an action on a resource of
    that action's kind, so a grant's name of one kind never matches a resource of another.
    """

    org_id: str
    project_id: str
    key_id: str
    permissions: tuple[tuple[str, str | None], ...]  # (action, resource or None for all)
    # The keys that minted this one, the root first (a key it mints records them and it).
    key_chain: tuple[str, ...] = ()

    @cached_property
    def grants(self) -> tuple[Grant, ...]:
        """The permissions as they are read (kind and name of each resource)."""
        return tuple(Grant.of(action, resource) for action, resource in self.permissions)

    def allows(self, action: str, resource: str | None = None) -> bool:
        """Whether a grant covers `action` on `resource` (of the action's kind).

        No resource means the whole project (an action on no one resource, or one whose
        resource is unknown): only a grant without a resource covers it, never a scoped one.
        """
        return any(grant.covers(action, resource) for grant in self.grants)

    def includes(self, action: str, resource: str | None) -> bool:
        """Whether the key holds the grant `(action, resource)` itself (creating or revoking
        a key with it needs that): `*` only from `*`, a resource of the same kind."""
        wanted = Grant.of(action, resource)
        return any(grant.includes(wanted) for grant in self.grants)

    def resources(self, action: str) -> frozenset[str] | None:
        """The resources the key holds `action` on: None when a grant covers every resource
        (so the caller need not filter), else the scoped grants' resources of the action's
        kind (maybe none)."""
        kind = action_kind(action)
        scopes: set[str] = set()
        for grant in self.grants:
            if grant.action in (ALL, action):
                if grant.name is None:
                    return None
                if grant.kind == kind:
                    scopes.add(grant.name)
        return frozenset(scopes)

    def sees(self, kind: str, name: str) -> bool:
        """Whether the key may read the `app` (by name) or `queue` (by ID) `name`: a list
        shows it, a read answers it (`Grant.sees`)."""
        return any(grant.sees(kind, name) for grant in self.grants)

    def holds(self, action: str) -> bool:
        """Whether the key holds `action` on at least one resource (or on all)."""
        return self.resources(action) != frozenset()


@dataclass(frozen=True)
class Notifications:
    queue_id: str
    on: tuple[str, ...]
    workflows: tuple[str, ...] | None = None
    group_by: Literal["run", "workflow"] = "run"

    def to_api(self) -> dict[str, Any]:
        return {
            "queueId": self.queue_id,
            "on": list(self.on),
            "workflows": None if self.workflows is None else list(self.workflows),
            "groupBy": self.group_by,
        }


@dataclass(frozen=True)
class App:
    id: str
    slug: str
    org_id: str
    project_id: str
    name: str
    kind: Literal["push", "pull"]
    url: str | None
    status: Literal["pending", "synced"]
    workflows: tuple[str, ...]
    signing_key: str
    created_at: str
    notifications: Notifications | None = None
    version: int = 1
    # The newest invocation protocol the app speaks, as its last sync answer (a push app) or
    # its workers' last announce (a pull app) said; None: it said none (before 1.5).
    protocol: str | None = None
    # The API key the app's code acts for: the key that last set what code it runs (created
    # it, changed its URL, synced it, or announced one of its workers). Its code invokes
    # another app's workflow only where this key may start it (None: an app registered
    # before apps recorded one, whose code invokes no other app until it is synced again).
    key_id: str | None = None

    def to_api(self) -> dict[str, Any]:
        """The API shape, without the signing key (shown only when the app is created)."""
        return {
            "id": self.id,
            "slug": self.slug,
            "name": self.name,
            "kind": self.kind,
            "url": self.url,
            "status": self.status,
            "workflows": list(self.workflows),
            "notifications": self.notifications.to_api() if self.notifications else None,
            "createdAt": self.created_at,
        }


@dataclass(frozen=True)
class RunError:
    code: str
    name: str
    message: str

    def to_api(self) -> dict[str, str]:
        return {"code": self.code, "name": self.name, "message": self.message}

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> RunError:
        """An error as an app sent it, cut to what a run or step keeps (`protocol_rules`)."""
        return cls(
            code=clip(str(data.get("code") or "user"), MAX_ERROR_FIELD_BYTES),
            name=clip(str(data.get("name") or "Error"), MAX_ERROR_FIELD_BYTES),
            message=clip(str(data.get("message") or ""), MAX_ERROR_MESSAGE_BYTES),
        )


# A step's error when its run's cancel, or its run's end, ended it before it did.
CANCELLED_ERROR = RunError("workflows.cancelled", "RunCancelledError", "the run was cancelled")
# Statuses of a step not ended yet (an ended run has none: `Run.step_view`).
STEP_PENDING_STATUSES = frozenset({"running", "retrying", "sleeping", "waiting"})


@dataclass(frozen=True)
class Step:
    id: str
    name: str
    kind: StepKind
    status: StepStatus
    attempt: int
    order: str  # time-ordered ID: steps list in the order they started
    started_at: str | None = None
    ended_at: str | None = None
    output: Any = None
    has_output: bool = False
    output_ref: str | None = None  # payload path when the output is stored outside the item
    error: RunError | None = None
    wake_at: str | None = None  # sleeps and waits with a deadline
    # Protocol-only (never in the API): run by a branch invocation of its own (parallel
    # steps); a callback's token salt (the URL is derived from it, see service.callbacks).
    branch: bool = False
    callback_salt: str | None = None
    child_run_id: str | None = None
    # Started inline (protocol 1.3): a `next` mark on the previous step's item, no item yet.
    inline: bool = False
    # A sleep woken by two single writes: its wake-up's mark, which the run item gets next
    # (`invocations_store.wake_sleep`; None on sleeps woken before, in one transaction).
    woke: str | None = field(default=None, compare=False, hash=False)
    # The run events the step's item carries (its `step.completed` and its branch
    # invocations' events, `core.events`), in ID order.
    events: tuple[dict[str, Any], ...] = field(default=(), compare=False, hash=False)
    # A parallel step no branch message claimed yet: it has no item, only its values in the
    # launch the run item names (these, as launched; `runs_store.get_run`). Its first
    # claim creates its item; the run's next outcome writes it as it is (`waiting`) first.
    launched: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "attempt": self.attempt,
        }
        if self.started_at:
            body["startedAt"] = self.started_at
        if self.ended_at:
            body["endedAt"] = self.ended_at
        if self.output_ref:
            body["outputRef"] = self.output_ref
        elif self.has_output:
            body["output"] = self.output
        if self.error:
            body["error"] = self.error.to_api()
        if self.wake_at:
            body["wakeAt"] = self.wake_at
        if self.child_run_id:  # an `invoke` step: the child run it started
            body["childRunId"] = self.child_run_id
        return body


@dataclass(frozen=True)
class Run:
    id: str
    org_id: str
    project_id: str
    app_id: str
    workflow: str
    status: RunStatus
    input: Any
    attempt: int
    created_at: str
    started_at: str
    version: int
    input_ref: str | None = None
    output: Any = None
    has_output: bool = False
    output_ref: str | None = None
    error: RunError | None = None
    run_key: str | None = None
    parent_run_id: str | None = None
    schedule_id: str | None = None
    ended_at: str | None = None
    parent_step_id: str | None = None  # the parent's `invoke` step of a child run
    deadline_at: str | None = None  # the run's time limit (StartRun timeoutSeconds)
    # Invocation bookkeeping: invoke_seq counts reasons to invoke; handled_seq is the last
    # one an invocation has answered; epoch is the lease generation that step calls carry.
    invoke_seq: int = 1
    handled_seq: int = 0
    epoch: int = 0
    lease_until_ms: int = 0
    invoke_failures: int = 0
    invoke_throttles: int = 0  # throttled deliveries in a row (service/invoker.py)
    # The app's name when the run started: the run's resource (`<app name>/<workflow>`) for
    # permission checks, which must survive the app's deletion (None on runs from before).
    app_name: str | None = None
    steps: tuple[Step, ...] = field(default=())
    # The last committed outcome's event, carried by the run item (`run_items.outcome_mark`)
    # until the next outcome writes it out as an event item (`run_writes.commit`).
    last_outcome: Any = field(default=None, compare=False, hash=False)
    # The mark of the run's last sleep wake-up (`invocations_store.wake_mark`), or None.
    woke: str | None = field(default=None, compare=False, hash=False)
    # The API key that polled the pull task of the current lease (`core.task_claims`): what
    # that task's code does acts for it. None: no task of this lease was polled by a key.
    task_key_id: str | None = field(default=None, compare=False, hash=False)
    # Up to which event ID the run's step events are also kept in order (segment items for
    # ListRunEvents: `adapters.run_writes.event_segments`); None: none kept yet.
    events_through: str | None = field(default=None, compare=False, hash=False)

    @property
    def ended(self) -> bool:
        return self.status in ENDED_STATUSES

    def to_api(self, *, with_steps: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "appId": self.app_id,
            "workflow": self.workflow,
            "status": self.status,
            "input": self.input,
            "attempt": self.attempt,
            "createdAt": self.created_at,
            "startedAt": self.started_at,
        }
        if self.output_ref:
            body["outputRef"] = self.output_ref
        elif self.has_output:
            body["output"] = self.output
        if self.error:
            body["error"] = self.error.to_api()
        for key, value in (
            ("runKey", self.run_key),
            ("parentRunId", self.parent_run_id),
            ("scheduleId", self.schedule_id),
            ("endedAt", self.ended_at),
        ):
            if value is not None:
                body[key] = value
        if with_steps:
            body["steps"] = [self.step_view(s).to_api() for s in self.steps]
        return body

    def step_view(self, step: Step) -> Step:
        """A step as the run's readers see it. A run that ends leaves no step pending: its
        end is written first, and each pending step is cancelled by a write of its own after
        it (`waits.cancel_leftovers`, at the run's end time); between the two, show what
        that write makes of it, so no reader sees an ended run with a step still running."""
        if not self.ended or step.status not in STEP_PENDING_STATUSES:
            return step
        return replace(
            step, status="cancelled", ended_at=self.ended_at, error=CANCELLED_ERROR, wake_at=None
        )
