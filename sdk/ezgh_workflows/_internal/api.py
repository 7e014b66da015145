"""The HTTP API base shared by `WorkflowsClient` and `QueuesClient`."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import httpx

ENV_API_URL = "EZGH_API_URL"
ENV_API_KEY = "EZGH_API_KEY"
ENV_ORG_ID = "EZGH_ORG_ID"
ENV_PROJECT_ID = "EZGH_PROJECT_ID"


class ApiError(Exception):
    """The API answered an error: ``status`` (HTTP), ``code`` and ``message`` from its body."""

    def __init__(
        self, status: int, code: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after  # seconds, from a Retry-After header (429, 503)


def _setting(value: str | None, env: str, what: str) -> str:
    found = value if value is not None else os.environ.get(env)
    if not found:
        raise ValueError(f"no {what}: pass it or set {env}")
    return found


def segment(value: str) -> str:
    """One URL path segment, percent-encoded."""
    return quote(str(value), safe="")


class ApiClient:
    """Settings (argument, else environment), an ``httpx.Client``, and error mapping."""

    def __init__(
        self,
        api_key: str | None = None,
        organization_id: str | None = None,
        project_id: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 30.0,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.api_key = _setting(api_key, ENV_API_KEY, "API key")
        self.organization_id = _setting(organization_id, ENV_ORG_ID, "organization ID")
        self.project_id = _setting(project_id, ENV_PROJECT_ID, "project ID")
        self.base_url = _setting(base_url, ENV_API_URL, "API base URL").rstrip("/")
        self._prefix = (
            f"/v1/organizations/{segment(self.organization_id)}/projects/{segment(self.project_id)}"
        )
        self._http = http_client or httpx.Client(timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Call ``<base url><prefix><path>``; the parsed JSON answer (``{}`` when empty)."""
        answer = self._http.request(
            method,
            self.base_url + self._prefix + path,
            json=json,
            params=params,
            headers={"Authorization": f"Bearer {self.api_key}", **(headers or {})},
        )
        if answer.status_code >= 400:
            raise _api_error(answer)
        if not answer.content:
            return {}
        return answer.json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _retry_after(answer: httpx.Response) -> float | None:
    try:
        return max(0.0, float(answer.headers.get("retry-after", "")))
    except ValueError:
        return None  # absent, or an HTTP date: the caller's own backoff applies


def _api_error(answer: httpx.Response) -> ApiError:
    retry_after = _retry_after(answer)
    try:
        error = answer.json()["error"]
        return ApiError(
            answer.status_code,
            str(error["code"]),
            str(error.get("message", "")),
            retry_after=retry_after,
        )
    except (ValueError, KeyError, TypeError):
        return ApiError(
            answer.status_code, "http_error", answer.text[:500], retry_after=retry_after
        )
