"""Request signatures between the engine and a push app (protocol section 1)."""

from __future__ import annotations

import hashlib
import hmac

TOLERANCE_SECONDS = 300
TIMESTAMP_HEADER = "x-ezgh-timestamp"
SIGNATURE_HEADER = "x-ezgh-signature"


def sign(key: str, timestamp: str, body: bytes) -> str:
    """``v1=<hex HMAC-SHA256(key, "<timestamp>.<raw body>")>``."""
    message = timestamp.encode("ascii") + b"." + body
    return "v1=" + hmac.new(key.encode("utf-8"), message, hashlib.sha256).hexdigest()


def verify(
    key: str, timestamp: str | None, signature: str | None, body: bytes, now: float
) -> str | None:
    """``None`` when the request verifies, else the reason it does not.

    The signature header may carry several comma-separated ``v1=`` values (key rotation).
    """
    if not timestamp or not signature:
        return "missing X-Ezgh-Timestamp or X-Ezgh-Signature header"
    if not timestamp.isascii() or not timestamp.isdigit():
        return "X-Ezgh-Timestamp is not an integer"
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        return "X-Ezgh-Timestamp is more than 300 seconds away from this server's clock"
    expected = sign(key, timestamp, body)
    candidates = [part.strip().encode("utf-8") for part in signature.split(",")]
    if any(hmac.compare_digest(expected.encode("ascii"), item) for item in candidates):
        return None
    return "signature does not verify"
