"""Invocation tokens: what authorizes an SDK's step calls for one run and one lease.

A token is `<base64url JSON claims>.<base64url HMAC-SHA256>`; verifying it needs no lookup.
The claims name the run, its project and the lease epoch, and expire with the lease.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass

from ezgh_engine.errors import Unauthorized


@dataclass(frozen=True)
class InvocationClaims:
    run_id: str
    project_id: str
    epoch: int
    attempt: int
    expires_ms: int
    # A branch invocation's token: `epoch` is the step's branch epoch, and only this step's
    # ops are allowed.
    step_id: str | None = None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def mint(secret: str, claims: InvocationClaims) -> str:
    body = {
        "r": claims.run_id,
        "p": claims.project_id,
        "e": claims.epoch,
        "a": claims.attempt,
        "x": claims.expires_ms,
    }
    if claims.step_id is not None:
        body["s"] = claims.step_id
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{payload}.{_sign(secret, payload)}"


def verify(secret: str, token: str, now_ms: int) -> InvocationClaims:
    """The token's claims, or `Unauthorized` when it is forged, malformed or expired."""
    payload, _, signature = token.partition(".")
    # A real token is ASCII; `compare_digest` raises TypeError on non-ASCII text.
    if not payload or not token.isascii():
        raise Unauthorized("invalid invocation token")
    if not hmac.compare_digest(signature, _sign(secret, payload)):
        raise Unauthorized("invalid invocation token")
    try:
        body = json.loads(_unb64(payload))
        claims = InvocationClaims(
            str(body["r"]),
            str(body["p"]),
            int(body["e"]),
            int(body["a"]),
            int(body["x"]),
            str(body["s"]) if body.get("s") is not None else None,
        )
    except (ValueError, KeyError, TypeError):
        raise Unauthorized("invalid invocation token") from None
    if claims.expires_ms < now_ms:
        raise Unauthorized("invocation token expired")
    return claims
