"""What an API key's grant covers: actions, and resources qualified by their kind.

A grant is `(action, resource)`. A resource names one thing of one **kind**, and the kind
is the action's: `workflows.runs.*` name a workflow (`<app name>/<workflow>`),
`workflows.apps.*` an app (its name), `queues.*` a queue (its ID), `flows.*` a flow (its
name). A check asks for an action on a resource of that action's kind, so a name of one kind
never matches a resource of another: `*` on a queue's ID covers that queue, never a flow or
an app that someone named with the same text.

A resource may also be written qualified, `<kind>:<name>` (`flow:orders`, `queue:<id>`,
`app:billing`, `workflow:billing/charge`): the only way to scope `*` to a flow, or to an app
named like a UUID. An unqualified resource is read by its action's kind; under `*`, whose
kind the action cannot tell, by its shape: with a `/` a workflow, a UUID a queue, anything
else an app (the meaning such grants had before flows existed). Keys keep their grants as
written; only their reading is kind-aware.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ezgh_engine.core.validation import is_uuid

ALL = "*"
KINDS = ("workflow", "app", "queue", "flow")
# An action's kind, by its prefix (the contract's actions and the engine's own).
_ACTION_KINDS = (
    ("workflows.runs.", "workflow"),
    ("workflows.apps.", "app"),
    ("queues.", "queue"),
    ("flows.", "flow"),
)
_QUALIFIED = re.compile(r"^(?P<kind>workflow|app|queue|flow):(?P<name>.+)$")


def action_kind(action: str) -> str | None:
    """The kind of resource `action` acts on (None for `*` or an action of no kind)."""
    for prefix, kind in _ACTION_KINDS:
        if action.startswith(prefix):
            return kind
    return None


def _kind_by_shape(name: str) -> str:
    if "/" in name:
        return "workflow"
    return "queue" if is_uuid(name) else "app"


@dataclass(frozen=True)
class Grant:
    """A grant as it is read: its action, and the kind and name of its resource (both None
    for a grant on every resource)."""

    action: str
    kind: str | None
    name: str | None

    @classmethod
    def of(cls, action: str, resource: str | None) -> Grant:
        """The grant a stored or requested `(action, resource)` stands for."""
        if resource is None:
            return cls(action, None, None)
        qualified = _QUALIFIED.match(resource)
        if qualified:
            return cls(action, qualified["kind"], qualified["name"])
        kind = action_kind(action) if action != ALL else _kind_by_shape(resource)
        return cls(action, kind, resource)

    def covers(self, action: str, resource: str | None) -> bool:
        """Whether this grant allows `action` on `resource` (a resource of the action's
        kind; None: the whole project, which only a grant on every resource covers)."""
        if self.action not in (ALL, action):
            return False
        if self.name is None:
            return True
        return resource is not None and self.kind == action_kind(action) and self.name == resource

    def includes(self, other: Grant) -> bool:
        """Whether holding this grant includes holding `other` (a key may create or revoke
        only keys whose every grant one of its own includes)."""
        if self.action != ALL and self.action != other.action:
            return False
        if self.name is None:
            return True
        return other.name is not None and (self.kind, self.name) == (other.kind, other.name)

    def sees(self, kind: str, name: str) -> bool:
        """Whether this grant shows a key the resource of `kind` named `name` in a list or a
        read: a grant of an action on that kind (or `*`) on every resource or on that one.
        An app is also seen through a grant on one of its workflows (`<app name>/<wf>`),
        and by any grant on every workflow: what a key may run, it may see the app of."""
        kinds = ("app", "workflow") if kind == "app" else (kind,)
        if self.name is None:
            return self.action == ALL or action_kind(self.action) in kinds
        if self.kind == kind and self.name == name:
            return True
        return kind == "app" and self.kind == "workflow" and self.name.startswith(name + "/")

    def kind_error(self) -> str | None:
        """What is wrong with a qualified resource whose kind is not its action's."""
        wanted = action_kind(self.action)
        if self.name is None or self.action == ALL or wanted is None or self.kind == wanted:
            return None
        return f"action {self.action!r} acts on a {wanted}, not on a {self.kind}"
