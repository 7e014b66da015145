"""`WorkflowsClient` and `QueuesClient`: thin, synchronous wrappers of the HTTP API."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from . import clock
from .api import ApiClient, ApiError, segment
from .protocol_rules import RUN_ENDED_STATUSES

SEND_RETRIES = 3  # QueuesClient.send: resends after the first attempt
MAX_RETRY_WAIT = 30.0  # seconds; a longer Retry-After is cut to this

_FILTER_NAMES = {
    "app_id": "appId",
    "run_key": "runKey",
    "created_after": "createdAfter",
    "created_before": "createdBefore",
}


def _filters(filters: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, value in filters.items():
        if value is None:
            continue
        params[_FILTER_NAMES.get(key, key)] = (
            value.isoformat() if isinstance(value, datetime) else value
        )
    return params


class WorkflowsClient(ApiClient):
    """EZGH Workflows API: apps and runs. Arguments fall back to ``EZGH_API_KEY``,
    ``EZGH_ORG_ID``, ``EZGH_PROJECT_ID`` and ``EZGH_API_URL``. Errors raise `ApiError`."""

    def start_run(
        self, app_id: str, workflow: str, input: Any = None, run_key: str | None = None
    ) -> Any:
        """Start a run; the run (201 new, or 200 the existing run for ``run_key``)."""
        body: dict[str, Any] = {"appId": app_id, "workflow": workflow, "input": input}
        if run_key is not None:
            body["runKey"] = run_key
        return self.request("POST", "/runs", json=body)

    def get_run(self, run_id: str) -> Any:
        """The run, with all its steps. One answer holds what fits Lambda's 6 MB: a run whose
        steps do not fit is read page by page (``stepsCursor``) and answered whole here. A
        value that did not fit is a reference (``inputRef``, ``outputRef``): `get_payload`."""
        path = f"/runs/{segment(run_id)}"
        run = self.request("GET", path)
        following = run.pop("nextStepsCursor", None) if isinstance(run, dict) else None
        while following:
            page = self.request("GET", path, params={"stepsCursor": following})
            run["steps"] = [*run.get("steps", []), *page.get("steps", [])]
            following = page.get("nextStepsCursor")
        return run

    def search_runs(self, **filters: Any) -> Any:
        """``{runs, nextCursor}``. Filters: ``app_id``, ``workflow``, ``status``, ``run_key``,
        ``created_after``, ``created_before``, ``limit``, ``cursor`` (camelCase works too)."""
        return self.request("GET", "/runs", params=_filters(filters))

    def cancel_run(self, run_id: str) -> Any:
        """Ask the run to cancel (202): ``cancelling``, then ``cancelled``."""
        return self.request("POST", f"/runs/{segment(run_id)}/cancel")

    def retry_run(self, run_id: str) -> Any:
        """Run a ``failed`` or ``timedOut`` run again with ``attempt`` + 1."""
        return self.request("POST", f"/runs/{segment(run_id)}/retry")

    def list_run_events(
        self, run_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> Any:
        """``{events, nextCursor}``: the run's invocations and step outcomes, in order."""
        params = _filters({"cursor": cursor, "limit": limit})
        return self.request("GET", f"/runs/{segment(run_id)}/events", params=params)

    def get_payload(self, run_id: str, path: str) -> Any:
        """A value an answer gave as a reference: a run's ``inputRef`` or ``outputRef``, or a
        step's ``outputRef`` (a value kept outside the run, or one an answer had no room
        for)."""
        # An outputRef is already percent-encoded: keep its escapes as they are.
        return self.request("GET", f"/runs/{segment(run_id)}/payloads/{quote(path, safe='/%')}")

    def delete_run(self, run_id: str) -> Any:
        """Delete an ended run (frees its ``runKey``)."""
        return self.request("DELETE", f"/runs/{segment(run_id)}")

    def wait_for_run(self, run_id: str, timeout: float = 300.0, interval: float = 1.0) -> Any:
        """Poll `get_run` until the run has ended; `TimeoutError` after ``timeout`` seconds."""
        deadline = clock.monotonic() + timeout
        while True:
            run = self.get_run(run_id)
            if run.get("status") in RUN_ENDED_STATUSES:
                return run
            if clock.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} has not ended after {timeout} seconds")
            time.sleep(interval)

    def create_app(self, name: str, kind: str, url: str | None = None) -> Any:
        """Create an app (``kind`` ``push`` or ``pull``); the answer has its ``signingKey``."""
        body: dict[str, Any] = {"name": name, "kind": kind}
        if url is not None:
            body["url"] = url
        return self.request("POST", "/apps", json=body)

    def get_app(self, app_id: str) -> Any:
        """An app, by UUID or slug."""
        return self.request("GET", f"/apps/{segment(app_id)}")

    def list_apps(self) -> Any:
        """``{apps}``: every app of the project (read page by page when one answer does not
        hold them all)."""
        return self.all_pages("/apps", "apps")

    def all_pages(self, path: str, name: str, params: dict[str, Any] | None = None) -> Any:
        """``{name: [...]}``: a list the API answers page by page (``nextCursor``), whole."""
        found: list[Any] = []
        cursor = None
        while True:
            query = {**(params or {}), **({"cursor": cursor} if cursor else {})}
            page = self.request("GET", path, params=query or None)
            found += page.get(name, [])
            cursor = page.get("nextCursor")
            if not cursor:
                return {name: found}

    def update_app(self, app_id: str, **fields: Any) -> Any:
        """Update ``url`` and/or ``notifications`` (``None`` clears them)."""
        return self.request("PATCH", f"/apps/{segment(app_id)}", json=fields)

    def sync_app(self, app_id: str) -> Any:
        """Have the engine call a push app to learn its workflows."""
        return self.request("POST", f"/apps/{segment(app_id)}/sync")

    def delete_app(self, app_id: str) -> Any:
        """Delete an app."""
        return self.request("DELETE", f"/apps/{segment(app_id)}")


class QueuesClient(ApiClient):
    """EZGH Queues API. Same arguments and fallbacks as `WorkflowsClient`."""

    def send(
        self, queue_id: str, messages: list[dict[str, Any]], *, idempotency_key: str | None = None
    ) -> Any:
        """Send 1 to 10 messages (``{body, attributes?, groupId?, dedupId?}``) to a queue;
        ``{messages: [{messageId, seq?}]}``."""
        if not 1 <= len(messages) <= 10:
            raise ValueError("send 1 to 10 messages at a time")
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        path = f"/queues/{segment(queue_id)}/messages"
        body = {"messages": list(messages)}
        # Seed 004: 429 (except quota_exceeded), 5xx and network errors are sent again after
        # Retry-After (else a short backoff), up to 3 times; any other 4xx raises at once.
        for attempt in range(SEND_RETRIES + 1):
            try:
                return self.request("POST", path, json=body, headers=headers)
            except ApiError as err:
                resend = err.status >= 500 or (err.status == 429 and err.code != "quota_exceeded")
                if not resend or attempt == SEND_RETRIES:
                    raise
                wait = err.retry_after
            except httpx.TransportError:
                if attempt == SEND_RETRIES:
                    raise
                wait = None
            time.sleep(min(MAX_RETRY_WAIT, wait if wait is not None else 0.5 * 2**attempt))
        raise AssertionError("unreachable")
