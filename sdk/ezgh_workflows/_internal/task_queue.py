"""A pull worker's direct line to its task queue: SQS with vended credentials.

The engine answers ``POST .../apps/{app}/tasks/access`` with an hour's credentials that can
only receive and delete the app's tasks, and where the queue is. Long-polling the queue with
them costs one SQS request per 20 s while idle, where ``tasks/poll`` keeps a Lambda function
waiting. The SDK has no AWS SDK dependency, so the two requests it makes (``ReceiveMessage``
and ``DeleteMessage``, SQS's JSON protocol) are signed here with Signature Version 4.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from . import clock

SERVICE = "sqs"
CONTENT_TYPE = "application/x-amz-json-1.0"
# Ask for fresh credentials this long before the current ones run out.
REFRESH_MARGIN_SECONDS = 300


class QueueError(Exception):
    """SQS refused a request: ``code`` is its error type (``QueueDoesNotExist``,
    ``ExpiredToken``, ``AccessDenied``...), ``status`` the HTTP status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"SQS {status} {code}: {message}")
        self.status = status
        self.code = code


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def sign_v4(
    *,
    url: str,
    body: bytes,
    headers: dict[str, str],
    access_key: str,
    secret_key: str,
    session_token: str | None,
    region: str,
    service: str,
    moment: datetime,
) -> dict[str, str]:
    """The headers of a SigV4-signed POST of `body` to `url` (no query string): `headers`
    plus Host, X-Amz-Date, X-Amz-Security-Token and Authorization, all headers signed."""
    parts = urlsplit(url)
    amz_date = moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    signed = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
    signed["host"] = parts.netloc
    signed["x-amz-date"] = amz_date
    if session_token:
        signed["x-amz-security-token"] = session_token
    names = sorted(signed)
    canonical = "\n".join(
        [
            "POST",
            parts.path or "/",
            "",
            "".join(f"{n}:{signed[n]}\n" for n in names),
            ";".join(names),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + secret_key).encode("utf-8"), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    out = {k: v for k, v in headers.items()}
    out["X-Amz-Date"] = amz_date
    if session_token:
        out["X-Amz-Security-Token"] = session_token
    out["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return out


@dataclass
class QueueAccess:
    """What ``tasks/access`` answered, and when (on the SDK's monotonic clock) it lapses."""

    queue_url: str
    endpoint_url: str
    region: str
    access_key: str
    secret_key: str
    session_token: str
    wait_seconds: int
    renew_at: float

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> QueueAccess:
        creds = answer["credentials"]
        lifetime = float(answer.get("expiresInSeconds") or 900)
        return cls(
            queue_url=str(answer["queueUrl"]),
            endpoint_url=str(answer["endpointUrl"]).rstrip("/"),
            region=str(answer["region"]),
            access_key=str(creds["accessKeyId"]),
            secret_key=str(creds["secretAccessKey"]),
            session_token=str(creds["sessionToken"]),
            wait_seconds=int(answer.get("waitSeconds") or 20),
            renew_at=clock.monotonic() + max(0.0, lifetime - REFRESH_MARGIN_SECONDS),
        )

    @property
    def fresh(self) -> bool:
        return clock.monotonic() < self.renew_at


class TaskQueue:
    """Receive and delete tasks on one app's queue with `QueueAccess` credentials."""

    def __init__(self, access: QueueAccess, http: httpx.Client) -> None:
        self.access = access
        self._http = http

    def _call(self, action: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        a = self.access
        body = json.dumps({"QueueUrl": a.queue_url, **params}).encode()
        url = a.endpoint_url + "/"
        headers = sign_v4(
            url=url,
            body=body,
            headers={"Content-Type": CONTENT_TYPE, "X-Amz-Target": f"AmazonSQS.{action}"},
            access_key=a.access_key,
            secret_key=a.secret_key,
            session_token=a.session_token,
            region=a.region,
            service=SERVICE,
            moment=clock.now(),
        )
        answer = self._http.post(url, content=body, headers=headers, timeout=timeout)
        if answer.status_code != 200:
            code, message = _error(answer)
            raise QueueError(answer.status_code, code, message)
        return answer.json() if answer.content else {}

    def receive(self, wait_seconds: int) -> tuple[str, str] | None:
        """One task's (body, receipt handle), waiting up to `wait_seconds` (≤ 20)."""
        wait = max(0, min(int(wait_seconds), 20))
        answer = self._call(
            "ReceiveMessage",
            {"MaxNumberOfMessages": 1, "WaitTimeSeconds": wait},
            timeout=wait + 15.0,
        )
        for message in answer.get("Messages") or []:
            return str(message["Body"]), str(message["ReceiptHandle"])
        return None

    def delete(self, receipt_handle: str) -> None:
        self._call("DeleteMessage", {"ReceiptHandle": receipt_handle}, timeout=15.0)


def _error(answer: httpx.Response) -> tuple[str, str]:
    """SQS's error type (without its namespace) and message."""
    try:
        body = answer.json()
    except ValueError:
        return "HTTP" + str(answer.status_code), answer.text[:200]
    code = str(body.get("__type") or body.get("code") or "").rsplit("#", 1)[-1]
    return code or f"HTTP{answer.status_code}", str(body.get("message") or body.get("Message"))
