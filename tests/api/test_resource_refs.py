"""Every `{appId}` and `{queueId}` path takes each form of its reference alike.

An app is named by its UUID, its `wfa_` slug or its name; a queue by its ID or its name. The
authorization matrix calls each operation of the OpenAPI document with the UUID; here each
operation whose path holds an app or a queue is called again, on a fresh world, with each other
form, by the key scoped exactly as the operation needs (so the permission check resolves the
form too), and answers as it does with the UUID. An unknown name is 404 on every such path, and
a queue reference that can be neither an ID nor a name is 400, as `send_to_queue` answers.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Project
from tests.api.test_authorization_matrix import (  # noqa: F401 (_engine_env: autouse fixture)
    MATRIX,
    World,
    _engine_env,
    _grant,
    build_world,
)
from tests.api.test_run_scopes import key

APP_OPS = sorted(op for op in MATRIX if "{appId}" in op[1])
QUEUE_OPS = sorted(op for op in MATRIX if "{queueId}" in op[1])
APPS = {"alpha": "alpha", "pusher": "pusher"}  # world.ids keys of the apps and their names


def _as(world: World, form: str) -> World:
    """The same world, its apps and queues named by `form` in the paths it builds."""
    named = World(world.project, dict(world.ids))
    for ref, name in APPS.items():
        if form == "name":
            named.ids[ref] = name
        elif form == "slug":
            named.ids[ref] = world.project.call("GET", f"/apps/{world.ids[ref]}").body["slug"]
    if form == "name":
        named.ids |= {"q1": "q1", "q2": "q2"}
    return named


def _call(project: Project, world: World, op: tuple[str, str], *, by: World) -> Any:
    """The operation as the matrix makes it, with its path built from `by`'s references,
    sent with a key holding exactly what it needs."""
    entry = MATRIX[op]
    subpath, kwargs = entry.request(by)
    needs = [_grant(world, a, r) for a, r in entry.needs[0]]
    secret = key(project, *needs) if needs else None
    return project.call(op[0], subpath, key=secret, **kwargs)


@pytest.mark.parametrize("form", ["slug", "name"])
@pytest.mark.parametrize("op", APP_OPS, ids=" ".join)
def test_an_app_path_takes_its_slug_or_name_as_its_uuid(
    project: Project, op: tuple[str, str], form: str
) -> None:
    world = build_world(project)
    answer = _call(project, world, op, by=_as(world, form))
    assert answer.status == MATRIX[op].ok, (form, answer.body)


@pytest.mark.parametrize("op", QUEUE_OPS, ids=" ".join)
def test_a_queue_path_takes_its_name_as_its_id(project: Project, op: tuple[str, str]) -> None:
    world = build_world(project)
    answer = _call(project, world, op, by=_as(world, "name"))
    assert answer.status == MATRIX[op].ok, answer.body


def test_an_unknown_reference_is_404_and_a_malformed_queue_one_400_on_every_path(
    project: Project,
) -> None:
    world = build_world(project)
    unknown = World(project, world.ids | {"alpha": "nope", "pusher": "wfa_nope", "q1": "nope"})
    malformed = World(project, world.ids | {"q1": "Not A Queue!"})
    for op in APP_OPS + QUEUE_OPS:
        subpath, kwargs = MATRIX[op].request(unknown)
        answer = project.call(op[0], subpath, **kwargs)
        assert answer.status == 404, (op, answer.body)
        assert answer.body["error"]["code"] == "not_found", (op, answer.body)
    for op in QUEUE_OPS:
        subpath, kwargs = MATRIX[op].request(malformed)
        answer = project.call(op[0], subpath, **kwargs)
        assert answer.status == 400, (op, answer.body)
        assert answer.body["error"]["code"] == "validation_error", (op, answer.body)
