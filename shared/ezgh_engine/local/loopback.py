"""The local runtime's own HTTP calls to the servers it runs (its API, at start and reset).

With the standard library's `http.client`: an HTTP client library would load a CA bundle
for TLS these calls never use (tens of milliseconds of a start, per client) and could send
them through a proxy named in the environment. One connection per call, closed after it.
Only loopback `http://` URLs are called: anything else is a ValueError, before any
connection.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: its status and its body."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    json_body: Any = None,
    timeout: float = 30.0,
) -> Answer:
    """Send one request to a loopback `url` (a JSON body if `json_body` is not None)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"not a loopback http URL: {url!r}")
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    sent = dict(headers or {})
    body = None
    if json_body is not None:
        body = json.dumps(json_body).encode()
        sent["Content-Type"] = "application/json"
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request(method, target, body=body, headers=sent)
        answer = connection.getresponse()
        return Answer(answer.status, answer.read())
    finally:
        connection.close()
