"""Signed HTTPS calls from the engine to push apps (docs/protocol.md section 1)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx

from ezgh_engine import clock
from ezgh_engine.config import settings
from ezgh_engine.core.models import App
from ezgh_engine.errors import EngineError, ValidationError

PROTOCOL_VERSION = "1.3"
SYNC_TIMEOUT_SECONDS = 30.0


class AppUnreachable(EngineError):
    """The app could not be reached or did not answer as the protocol says (retryable)."""

    status, code = 502, "app_unreachable"
    retryable = True


def sign(signing_key: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(signing_key.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def _forbidden_address(address: str, *, allow_local: bool = False) -> bool:
    """Never link-local (the instance metadata service), multicast, reserved or unspecified;
    loopback and private only when `allow_local` (`ezgh dev`)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    reserved = ip.is_reserved and not ip.is_loopback  # ::1 sits in the reserved ::/8
    if ip.is_link_local or ip.is_multicast or reserved or ip.is_unspecified:
        return True
    return not allow_local and (ip.is_loopback or ip.is_private)


def check_app_url(url: str, *, allow_loopback: bool | None = None) -> str:
    """Refuse URLs the engine must not call: not http(s); a link-local (metadata),
    multicast or reserved host always; a loopback or private host except under `ezgh dev`.
    Answers the URL."""
    allow = settings().allow_loopback_apps if allow_loopback is None else allow_loopback
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValidationError("url must be an absolute https URL")
    if parts.scheme == "http" and not allow:
        raise ValidationError("url must use https")
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except OSError:
        return url  # unresolvable now; checked again when called
    if any(_forbidden_address(str(info[4][0]), allow_local=allow) for info in infos):
        raise ValidationError(
            "url must not point at a link-local or metadata address"
            if allow
            else "url must not point at a loopback, link-local or private address"
        )
    return url


def _post(app: App, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    if not app.url:
        raise AppUnreachable(f"app {app.name} has no URL")
    try:
        check_app_url(app.url)
    except ValidationError as exc:
        raise AppUnreachable(f"app {app.name} at {app.url}: {exc.message}") from None
    raw = json.dumps(body, separators=(",", ":")).encode()
    timestamp = clock.wall_seconds()
    headers = {
        "Content-Type": "application/json",
        "X-Ezgh-Timestamp": str(timestamp),
        "X-Ezgh-Signature": sign(app.signing_key, timestamp, raw),
        "User-Agent": "ezgh-engine",
    }
    try:
        answer = httpx.post(
            app.url, content=raw, headers=headers, timeout=timeout, follow_redirects=False
        )
    except httpx.HTTPError as exc:
        raise AppUnreachable(f"could not reach app {app.name} at {app.url}: {exc!r}") from None
    if answer.status_code != 200:
        raise AppUnreachable(
            f"app {app.name} at {app.url} answered HTTP {answer.status_code}: {answer.text[:200]}"
        )
    try:
        data = answer.json()
    except ValueError:
        raise AppUnreachable(
            f"app {app.name} at {app.url} answered a body that is not JSON"
        ) from None
    if not isinstance(data, dict):
        raise AppUnreachable(f"app {app.name} at {app.url} answered a body that is not an object")
    return data


def sync_app(app: App) -> list[str]:
    """Ask a push app which workflows it hosts."""
    data = _post(app, {"protocol": PROTOCOL_VERSION, "type": "sync"}, SYNC_TIMEOUT_SECONDS)
    workflows = data.get("workflows")
    if not isinstance(workflows, list):
        raise AppUnreachable(f"app {app.name} answered sync without a workflows list")
    names = [w.get("name") if isinstance(w, dict) else w for w in workflows]
    if not all(isinstance(n, str) and n for n in names):
        raise AppUnreachable(f"app {app.name} answered sync with a malformed workflows list")
    return [str(n) for n in names]


def invoke_app(app: App, request: dict[str, Any]) -> dict[str, Any]:
    """Deliver one invocation and answer the app's outcome body."""
    return _post(app, request, settings().invoke_timeout_seconds)
