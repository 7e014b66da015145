"""Who may talk to `ezgh dev`'s embedded emulator (moto's server, and the local Lambda API).

They listen on loopback, and loopback is every local user's and every web page's (a browser
sends a page's requests to 127.0.0.1 too; moto answers CORS preflights for any origin).
Without a gate anyone there could list and write the tables (API key hashes, runs, sealed
signing keys), read the payloads and send messages as the engine. So each emulator start
makes credentials of its own (`new_credentials`: a random access key ID and secret, which
the engine's processes get in `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, and nobody else),
and the gate answers a request only when:

- it is signed (SigV4, in its `Authorization` header) with that access key ID: the engine's
  own handlers, pollers, scheduler and tests in its process; or
- it is signed with a session moto's STS vended to a pull worker (`service.pull.queue_access`,
  through the API with the worker's API key) and still live, and its session policy allows
  the request: SQS `ReceiveMessage`/`DeleteMessage` on the worker's own task queue, nothing
  else (moto enforces no IAM: the gate evaluates that one policy); or
- it is the engine's own call of moto's management API (`/moto-api/...`) with the key in
  `X-Ezgh-Emulator-Key`.

Credentials in a query string (a presigned URL) are refused whoever signed them: a URL handed
to an app would hand it the engine's key. What an app fetches under `ezgh dev` comes through
the engine's front (the API), never from the emulator.

Everything else is `403` (`UnrecognizedClientException`, as AWS answers an unknown key). The
access key ID travels in every request on loopback, readable only by root there; a user
(or code) that can read the `ezgh dev` process's environment or its state dir can read the
admin key anyway.
"""

from __future__ import annotations

import fnmatch
import hmac
import io
import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ezgh_engine import clock, ids

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

KEY_HEADER = "X-Ezgh-Emulator-Key"  # the engine's own calls of `/moto-api/...`
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/[^/]*/([^/]*)/([^/,\s]*)/")
_REFUSAL = {
    "__type": "UnrecognizedClientException",
    "message": "The security token included in the request is invalid.",
}


def new_credentials() -> tuple[str, str]:
    """An access key ID and a secret access key for one emulator start."""
    return "AKEZGH" + ids.secret_token(15).upper().replace("-", "0").replace("_", "1"), (
        ids.secret_token(30)
    )


def signed_by(authorization: str | None) -> tuple[str, str] | None:
    """The access key ID and the service of a SigV4 `Authorization` header, or None."""
    match = _CREDENTIAL.search(authorization or "")
    return (match.group(1), match.group(3)) if match else None


def same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class EmulatorGate:
    """WSGI middleware in front of the emulator: see the module's docstring."""

    def __init__(self, app: WsgiApp, access_key_id: str) -> None:
        self.app = app
        self.access_key_id = access_key_id

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if self.allows(environ):
            return self.app(environ, start_response)
        body = json.dumps(_REFUSAL).encode()
        start_response(
            "403 Forbidden",
            [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("x-amzn-ErrorType", _REFUSAL["__type"]),
                ("Content-Length", str(len(body))),
            ],
        )
        return [body]

    def allows(self, environ: dict[str, Any]) -> bool:
        if str(environ.get("PATH_INFO", "")).startswith("/moto-api"):
            return same(str(environ.get("HTTP_X_EZGH_EMULATOR_KEY", "")), self.access_key_id)
        if "x-amz-credential" in str(environ.get("QUERY_STRING", "")).lower():
            return False  # a presigned URL: never (see the module's docstring)
        signer = signed_by(environ.get("HTTP_AUTHORIZATION"))
        if signer is None:
            return False
        key_id, service = signer
        if same(key_id, self.access_key_id):
            return True
        return service == "sqs" and worker_may(key_id, environ)


def worker_may(key_id: str, environ: dict[str, Any]) -> bool:
    """Whether a live session moto's STS vended as `key_id` may make this SQS request, by
    its session policy (the only policy such a session has: `service.pull.session_policy`)."""
    role = _vended_session(key_id)
    if role is None or not role.policy:
        return False
    action, queue_url = _sqs_request(environ)
    if not action or not queue_url:
        return False
    account, _, name = urlsplit(queue_url).path.strip("/").partition("/")
    arn = f"arn:aws:sqs:{role.region_name}:{account}:{name}"
    try:
        statements = json.loads(role.policy).get("Statement") or []
    except (ValueError, AttributeError):
        return False
    for statement in statements if isinstance(statements, list) else [statements]:
        if not isinstance(statement, dict) or statement.get("Effect") != "Allow":
            continue
        if _matches(statement.get("Action"), f"sqs:{action}") and _matches(
            statement.get("Resource"), arn
        ):
            return True
    return False


def _matches(patterns: Any, value: str) -> bool:
    listed = patterns if isinstance(patterns, list) else [patterns]
    return any(isinstance(p, str) and fnmatch.fnmatchcase(value, p) for p in listed)


def _vended_session(key_id: str) -> Any:
    """moto's record of the STS session with this access key ID, if it is still live."""
    from moto.sts.models import sts_backends

    for account in list(sts_backends.keys()):
        for backend in list(sts_backends[account].values()):
            for role in list(getattr(backend, "assumed_roles", [])):
                if not same(role.access_key_id, key_id):
                    continue
                expires = role.expiration.replace(tzinfo=UTC).timestamp()
                return role if expires > clock.wall_seconds() else None
    return None


def _sqs_request(environ: dict[str, Any]) -> tuple[str, str]:
    """An SQS request's action and queue URL (JSON or query protocol); the body is read
    and put back for the emulator."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return "", ""
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
    if target.startswith("AmazonSQS."):
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            return "", ""
        url = params.get("QueueUrl") if isinstance(params, dict) else None
        return target.removeprefix("AmazonSQS."), url if isinstance(url, str) else ""
    form = parse_qs(body.decode("utf-8", "replace"))
    return (form.get("Action") or [""])[0], (form.get("QueueUrl") or [""])[0]
