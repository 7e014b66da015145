"""Grants read by kind (`core.grants`): a resource name of one kind never matches another."""

from __future__ import annotations

import pytest
from ezgh_engine.core.grants import Grant, action_kind
from ezgh_engine.core.models import Principal

QUEUE = "0b9f5c2e-5d2a-4c1e-9a77-3f0f1c2d3e4f"


def key(*permissions: tuple[str, str | None]) -> Principal:
    return Principal("org", "project", "key", permissions)


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        ("workflows.runs.start", "workflow"),
        ("workflows.runs.read", "workflow"),
        ("workflows.apps.update", "app"),
        ("queues.messages.send", "queue"),
        ("queues.subscriptions.create", "queue"),
        ("flows.jobs.start", "flow"),
        ("flows.manage", "flow"),
        ("*", None),
    ],
)
def test_each_action_names_one_kind_of_resource(action: str, kind: str | None) -> None:
    assert action_kind(action) == kind


def test_star_on_a_queue_id_covers_that_queue_and_no_flow_or_app_of_that_name() -> None:
    star = key(("*", QUEUE))
    assert star.allows("queues.messages.send", QUEUE)
    assert star.allows("queues.manage", QUEUE)
    for action in ("flows.manage", "flows.jobs.start", "flows.jobs.read", "workflows.apps.update"):
        assert not star.allows(action, QUEUE), action
    assert star.resources("flows.manage") == frozenset()
    assert star.resources("queues.messages.send") == {QUEUE}


def test_a_bare_name_under_star_is_an_app_and_a_qualified_one_says_its_kind() -> None:
    assert key(("*", "billing")).allows("workflows.apps.update", "billing")
    assert not key(("*", "billing")).allows("flows.jobs.start", "billing")
    assert not key(("*", "billing")).allows("workflows.runs.start", "billing")
    assert key(("*", "billing/charge")).allows("workflows.runs.start", "billing/charge")
    flow = key(("*", "flow:orders"))
    assert flow.allows("flows.jobs.start", "orders") and flow.allows("flows.manage", "orders")
    assert not flow.allows("workflows.apps.update", "orders")
    assert key(("*", f"app:{QUEUE}")).allows("workflows.apps.update", QUEUE)
    assert not key(("*", f"app:{QUEUE}")).allows("queues.manage", QUEUE)


def test_a_scoped_action_reads_its_resource_by_its_own_kind() -> None:
    send = key(("queues.messages.send", QUEUE))
    assert send.allows("queues.messages.send", QUEUE)
    assert not send.allows("queues.manage", QUEUE)
    flows = key(("flows.jobs.start", QUEUE))  # a flow named like a UUID
    assert flows.allows("flows.jobs.start", QUEUE)
    assert not flows.allows("queues.messages.send", QUEUE)
    assert not key(("flows.jobs.start", "queue:x")).allows("flows.jobs.start", "x")


def test_no_resource_is_the_whole_project_and_only_an_unscoped_grant_covers_it() -> None:
    assert key(("*", None)).allows("queues.manage")
    assert not key(("*", QUEUE)).allows("queues.manage")
    assert key(("queues.manage", None)).allows("queues.manage", QUEUE)


def test_a_key_includes_only_grants_of_the_same_kind_and_name() -> None:
    star = key(("*", QUEUE))
    assert star.includes("queues.messages.send", QUEUE)
    assert star.includes("*", QUEUE) and star.includes("*", f"queue:{QUEUE}")
    assert not star.includes("flows.manage", QUEUE)
    assert not star.includes("*", f"flow:{QUEUE}")
    assert not key(("flows.manage", "orders")).includes("*", "flow:orders")
    assert key(("flows.manage", None)).includes("flows.manage", "orders")


def test_a_qualified_resource_of_another_kind_than_its_action_is_an_error() -> None:
    assert Grant.of("queues.messages.send", "flow:x").kind_error()
    assert Grant.of("queues.messages.send", f"queue:{QUEUE}").kind_error() is None
    assert Grant.of("*", "flow:x").kind_error() is None
