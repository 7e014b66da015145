"""What a flow's user directs, run in the `sandbox` function: JMESPath (templates, transforms,
conditions) and `http.request`'s HTTP call.

The sandbox holds nothing worth taking: no token secret, no table, no queue, no grant of
any kind (its role allows only its logs), so an expression or a URL that a user wrote can
reach nothing of the engine's, and a resource bomb takes only the sandbox's memory and time
(and `core.flows.bounded` stops it long before). The interpreter (the `flows` function)
checks the job's authority, then asks here for what the user's text computes
(`adapters.sandbox.call`). One request, one answer, both JSON:

- `{"op": "render", "config", "scope"}`: the config with its templates rendered;
- `{"op": "pure", "node", "scope"}`: the output of a trigger, transform or condition node;
- `{"op": "http", "config", "scope", "trackingId", "idempotencyKey"}`: the config rendered,
  then its request sent to the address the URL's check resolved (pinned: no second DNS
  answer can re-point it), under the push apps' URL rules (loopback and private hosts only
  where the sandbox's own environment says `ezgh dev`).

The answer is `{"ok": <value>}` or `{"error": {"kind", "message"}}`, `kind` one of
`module` (the user's config or expression is wrong: the node fails), `client` (a 4xx:
the node fails) and `server` (a 5xx, a 429 or a network error: the node's step retries).
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any
from urllib.parse import urlsplit

import httpx

from ezgh_engine.config import ENV_ALLOW_LOOPBACK
from ezgh_engine.core.flows.graph import Node
from ezgh_engine.core.flows.planning import pure_output
from ezgh_engine.core.flows.templating import TemplateError, render

HTTP_TIMEOUT_SECONDS = 30
MAX_ERROR_BODY = 300


class UserError(Exception):
    """What the user's text asked for failed; `kind` says whether a retry may help."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _rendered(config: Any, scope: Any) -> dict[str, Any]:
    try:
        value = render(config, scope)
    except TemplateError as err:
        raise UserError("module", str(err)) from None
    return value if isinstance(value, dict) else {}


def _pure(request: dict[str, Any]) -> Any:
    raw = request.get("node") or {}
    node = Node(str(raw.get("id")), str(raw.get("moduleType")), dict(raw.get("config") or {}))
    try:
        return pure_output(node, request.get("scope") or {})
    except TemplateError as err:
        raise UserError("module", str(err)) from None


def _body(answer: httpx.Response) -> Any:
    if "json" in answer.headers.get("content-type", ""):
        try:
            return answer.json()
        except ValueError:
            pass
    return answer.text


def _emulator(address: str, port: int | None) -> bool:
    """Whether a loopback address and port are the local emulator's (`ezgh dev`: its AWS
    endpoints, in this function's environment), which answers without credentials."""
    if not ipaddress.ip_address(address).is_loopback:
        return False
    for name, value in os.environ.items():
        if name.startswith("AWS_ENDPOINT_URL"):
            endpoint = urlsplit(value)
            if endpoint.port is not None and endpoint.port == port:
                return True
    return False


def _send(config: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The rendered config's request, to the checked address; its answer."""
    from ezgh_engine.adapters.push import check_target, pinned_request
    from ezgh_engine.errors import ValidationError

    url = str(config.get("url", ""))
    try:  # the push apps' rules: no metadata, no private hosts deployed, https deployed
        target = check_target(url, allow_loopback=os.environ.get(ENV_ALLOW_LOOPBACK) == "1")
    except ValidationError as err:
        raise UserError("module", f"http.request {url!r}: {err.message}") from None
    if _emulator(target.address, urlsplit(url).port):
        raise UserError("module", f"http.request {url!r}: url must not point at the engine itself")
    headers = {str(k): str(v) for k, v in (config.get("headers") or {}).items()}
    headers["X-Tracking-Id"] = str(request.get("trackingId") or "")
    # The same on every attempt of the node: a receiver can drop a repeated request.
    headers.setdefault("Idempotency-Key", str(request.get("idempotencyKey") or ""))
    body = config.get("body")
    kwargs: dict[str, Any] = {"headers": headers}
    if isinstance(body, dict | list | int | float | bool):
        kwargs["json"] = body
    elif body is not None:
        kwargs["content"] = str(body)
    timeout = float(config.get("timeoutSeconds") or HTTP_TIMEOUT_SECONDS)
    method = str(config.get("method") or "GET")
    try:
        answer = pinned_request(target, method, timeout=timeout, **kwargs)
    except httpx.HTTPError as err:
        raise UserError("server", f"{method} {url}: {type(err).__name__}") from None
    if answer.status_code >= 500 or answer.status_code == 429:
        raise UserError("server", f"{answer.status_code} from {url}")
    if answer.status_code >= 400:
        text = answer.text[:MAX_ERROR_BODY]
        raise UserError("client", f"{answer.status_code} from {url}: {text}")
    return {"status": answer.status_code, "headers": dict(answer.headers), "body": _body(answer)}


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Answer one request of the interpreter (see the module's docstring)."""
    op = request.get("op")
    try:
        if op == "render":
            return {"ok": _rendered(request.get("config"), request.get("scope"))}
        if op == "pure":
            return {"ok": _pure(request)}
        if op == "http":
            config = _rendered(request.get("config"), request.get("scope"))
            return {"ok": _send(config, request)}
    except UserError as err:
        return {"error": {"kind": err.kind, "message": err.message}}
    return {"error": {"kind": "module", "message": f"the sandbox has no op {op!r}"}}
