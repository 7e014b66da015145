"""Request signatures between the engine and a push app (protocol section 1).

Protocol 1.4 signs ``v2``: the timestamp, the request's method and path, the invocation it
delivers (``X-Ezgh-Invocation: <invocationId>/<epoch>``, empty for a sync) and the raw body.
A captured request can then be replayed only as itself, within 300 seconds: to the same path,
repeating an invocation whose step calls the engine refuses once it has answered or its epoch
is over. The engine also sends the ``v1`` form (timestamp and body only) for older SDKs; this
SDK does not accept ``v1`` alone.
"""

from __future__ import annotations

import hashlib
import hmac

TOLERANCE_SECONDS = 300
TIMESTAMP_HEADER = "x-ezgh-timestamp"
SIGNATURE_HEADER = "x-ezgh-signature"
INVOCATION_HEADER = "x-ezgh-invocation"


def sign(key: str, timestamp: str, body: bytes) -> str:
    """``v1=<hex HMAC-SHA256(key, "<timestamp>.<raw body>")>``: the form before 1.4."""
    message = timestamp.encode("ascii") + b"." + body
    return "v1=" + hmac.new(key.encode("utf-8"), message, hashlib.sha256).hexdigest()


def sign_v2(key: str, timestamp: str, method: str, path: str, invocation: str, body: bytes) -> str:
    """``v2=<hex HMAC-SHA256(key, "v2\\n<ts>\\n<METHOD>\\n<path>\\n<invocation>\\n<body>")>``."""
    head = f"v2\n{timestamp}\n{method.upper()}\n{path}\n{invocation}\n"
    return (
        "v2="
        + hmac.new(key.encode("utf-8"), head.encode("utf-8") + body, hashlib.sha256).hexdigest()
    )


def signed_headers(
    key: str, timestamp: str, body: bytes, *, path: str = "/", invocation: str = ""
) -> dict[str, str]:
    """The headers the engine sends with a POST (both forms), for tests and tools."""
    v2 = sign_v2(key, timestamp, "POST", path, invocation, body)
    headers = {
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: f"{sign(key, timestamp, body)},{v2}",
    }
    if invocation:
        headers[INVOCATION_HEADER] = invocation
    return headers


def verify(
    key: str,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    now: float,
    *,
    method: str = "POST",
    path: str = "/",
    invocation: str = "",
) -> str | None:
    """``None`` when the request verifies, else the reason it does not.

    The signature header may carry several comma-separated values (both forms, key
    rotation); one ``v2=`` value must verify.
    """
    if not timestamp or not signature:
        return "missing X-Ezgh-Timestamp or X-Ezgh-Signature header"
    if not timestamp.isascii() or not timestamp.isdigit():
        return "X-Ezgh-Timestamp is not an integer"
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        return "X-Ezgh-Timestamp is more than 300 seconds away from this server's clock"
    candidates = [part.strip() for part in signature.split(",")]
    v2 = [c.encode("utf-8", "surrogatepass") for c in candidates if c.startswith("v2=")]
    if not v2:
        return "no v2 signature: this SDK needs an engine speaking protocol 1.4 or later"
    expected = sign_v2(key, timestamp, method, path, invocation, body).encode("ascii")
    if any(hmac.compare_digest(expected, item) for item in v2):
        return None
    return "signature does not verify (for this method, path, invocation and body)"
