"""Authentication before validation, and 405 for a method a path does not serve, over every
operation and path of the API's own OpenAPI document.

A caller without a valid credential learns nothing about the API's shapes: with a bad key (or
none) and an empty, malformed or wrong body or query, every project operation answers `401`,
never `400 validation_error`; the engine's protocol routes (invocation token) likewise; a
callback URL whose token names nothing answers `404` whatever its body. And any method a path
does not serve (TRACE, PROPFIND, a known method the path lacks) answers the contract's `405
method_not_allowed`, with `Allow`, never a 404 or an HTML page.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from ezgh_engine import ids
from ezgh_engine.api.app import openapi

from tests.api.conftest import Project, call

METHODS = ("get", "post", "put", "patch", "delete")


def _document() -> dict[str, Any]:
    return dict(json.loads(openapi().body))


DOCUMENT = _document()
OPERATIONS = [
    (method.upper(), path, operation)
    for path, item in DOCUMENT["paths"].items()
    for method, operation in item.items()
    if method in METHODS
]


def _concrete(path: str, project: Project) -> str:
    """The path with the project's own IDs and made-up ones for everything else."""
    values = {"orgId": project.org_id, "projectId": project.project_id, "token": "x" * 43}
    for part in path.split("/"):
        if part.startswith("{") and part.endswith("}"):
            path = path.replace(part, values.get(part[1:-1], ids.new_id()))
    return path


def _expected(path: str) -> tuple[int, str] | None:
    """What a caller without a valid credential gets on `path` (None: a public path)."""
    if path.startswith("/v1/organizations/"):
        return 401, "unauthorized"  # an API key
    if path.startswith("/v1/invocations/"):
        return 401, "unauthorized"  # an invocation token
    if path.startswith("/v1/callbacks/"):
        return 404, "not_found"  # the URL's token names no callback
    assert path in ("/v1/health",), f"classify {path}: who may call it?"
    return None


BAD_CALLERS = {
    "no key": {},
    "unknown key": {"authorization": "Bearer ezgh_not-a-key"},
    "not bearer": {"authorization": "Basic dXNlcjpwYXNz"},
}
BAD_REQUESTS = {
    "empty body": {},
    "malformed body": {"raw_body": "{"},
    "wrong body": {"body": {"unexpected": [1, 2]}},
    "bad query": {"query": {"limit": "-5", "status": "nonsense", "createdAfter": "x"}},
}


@pytest.mark.parametrize(
    ("method", "path"),
    [(m, p) for m, p, _ in OPERATIONS],
    ids=[f"{m} {p}" for m, p, _ in OPERATIONS],
)
def test_no_valid_credential_learns_nothing_of_the_shapes(
    method: str, path: str, project: Project
) -> None:
    expected = _expected(path)
    if expected is None:
        pytest.skip("a public path")
    concrete = _concrete(path, project)
    for caller, headers in BAD_CALLERS.items():
        for request, kwargs in BAD_REQUESTS.items():
            answer = call(method, concrete, headers=headers, **kwargs)
            got = (answer.status, (answer.body or {}).get("error", {}).get("code"))
            assert got == expected, f"{caller}, {request}: {answer.status} {answer.raw[:300]}"


def test_a_bad_key_and_an_empty_body_on_start_run_is_401(project: Project) -> None:
    answer = call(
        "POST", f"{project.prefix}/runs", headers={"authorization": "Bearer nope"}, raw_body=""
    )
    assert answer.status == 401, answer.raw
    assert answer.body["error"]["code"] == "unauthorized"


def test_a_valid_key_still_gets_validation_errors(project: Project) -> None:
    """The gate lets a valid key through to validation (and reads the key once)."""
    answer = project.call("POST", "/runs", raw_body="")
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"


def test_another_projects_path_is_still_404_for_a_valid_key(
    project: Project, other_project: Project
) -> None:
    answer = call(
        "POST",
        f"{other_project.prefix}/runs",
        headers=project.auth(),
        raw_body="{",
    )
    assert answer.status == 404 and answer.body["error"]["code"] == "not_found"


UNSERVED = ("TRACE", "PROPFIND", "CONNECT", "MKCOL", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


def _served(concrete: str) -> set[str]:
    """The methods of every documented template that matches `concrete` (a flow may be
    named `moduleTypes`: `PATCH /flows/moduleTypes` is served)."""
    served = set()
    for template, item in DOCUMENT["paths"].items():
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, concrete):
            served |= {m.upper() for m in item if m in METHODS}
    return served


@pytest.mark.parametrize("path", sorted(DOCUMENT["paths"]))
def test_a_method_the_path_does_not_serve_is_405(path: str, project: Project) -> None:
    concrete = _concrete(path, project)
    served = _served(concrete)
    assert served, path
    for method in UNSERVED:
        if method in served:
            continue
        answer = call(method, concrete, headers=project.auth())
        assert answer.status == 405, f"{method} {path}: {answer.status} {answer.raw[:200]}"
        assert answer.body == {
            "error": {"code": "method_not_allowed", "message": answer.body["error"]["message"]}
        }
        allow = {k.lower(): v for k, v in answer.headers.items()}["allow"]
        assert served <= {m.strip() for m in allow.split(",")}, (method, path, allow)


def test_an_unknown_path_is_still_404(project: Project) -> None:
    for method in ("GET", "TRACE"):
        answer = call(method, f"{project.prefix}/nothing-here", headers=project.auth())
        assert answer.status == 404 and answer.body["error"]["code"] == "not_found"
