"""`Idempotency-Key` on creating POSTs: the same key and body answer the first answer again.

A record `IDEM#<projectId>#<apiKeyId>#<operation>#<key>` is claimed (conditional put) before the request
runs and then holds the first answer for 48 hours. Rules:

- same key, same body, answer known: that answer (status and body) again;
- same key, another body: `409 idempotency_conflict`;
- same key while the first request still runs: wait briefly for its answer, then
  `409 idempotency_conflict` ("still in progress; retry"). A claim older than the API's
  longest run time belongs to a request that died, and is taken over (for StartRun and
  sends, whose effects are seeded, one older than that wait). The request's effects
  take their IDs from the claim's seed, which a takeover keeps (`ids.effect_id`): a run it
  starts has the first attempt's run ID, a message it sends the first attempt's
  `messageId`, so the dead request's effect is found (a run) or recognised by every
  consumer (a message), not made a second time;
- the first request failed (any error): the claim is let go (marked released, its seed
  kept: what the failed request did before failing is found again), so a retry runs
  again. Only successful answers are replayed;
- the first request succeeded but storing its answer fails: the store is retried, and the
  caller gets its answer even if it still fails (its effect happened; failing it would only
  make the caller resend).

Answers can hold secrets (`POST /apiKeys` answers the key's secret, stored nowhere else), so
the record keeps neither the Idempotency-Key nor the answer in clear: its ID holds the key's
SHA-256, and the answer is AES-GCM-sealed with a key derived from the engine's token secret
and the Idempotency-Key. Reading the table alone reveals no answer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
import zlib
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ezgh_engine import clock, ids
from ezgh_engine.adapters import idempotency_store
from ezgh_engine.config import settings
from ezgh_engine.core.models import Principal
from ezgh_engine.errors import Conflict, ValidationError

TTL_SECONDS = 48 * 3600
# The API Lambda times out after 29 s; an unfinished claim older than this is abandoned.
STALE_CLAIM_MS = 60_000
# How long a repeat waits for a concurrent first request before answering 409 (or, for an
# operation whose effects are seeded, taking its claim over).
WAIT_SECONDS = 2.0
_POLL_SECONDS = 0.1
# Pauses between attempts to store an answer whose request had its effect.
FINISH_RETRY_SECONDS = (0.05, 0.2, 0.5, 1.0)
_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")  # printable ASCII, no spaces

Answer = tuple[int, Any]
log = logging.getLogger(__name__)


def _cipher_key(idempotency_key: str) -> bytes:
    secret = settings().token_secret.encode()
    return hmac.new(secret, b"idempotency-answer\x1f" + idempotency_key.encode(), "sha256").digest()


def _seal(idempotency_key: str, pk: str, claim_token: str, body: Any) -> bytes:
    plain = zlib.compress(json.dumps(body, separators=(",", ":")).encode())
    # A fresh nonce per seal: the claim token is a random UUID made for this claim only.
    nonce = hashlib.sha256(claim_token.encode()).digest()[:12]
    return nonce + AESGCM(_cipher_key(idempotency_key)).encrypt(nonce, plain, pk.encode())


def _unseal(idempotency_key: str, pk: str, sealed: bytes) -> Any:
    nonce, data = sealed[:12], sealed[12:]
    try:
        plain = AESGCM(_cipher_key(idempotency_key)).decrypt(nonce, data, pk.encode())
    except InvalidTag:  # sealed under a rotated token secret
        raise _conflict(
            "this Idempotency-Key already succeeded; its answer cannot be replayed"
        ) from None
    return json.loads(zlib.decompress(plain))


def _request_hash(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _response(status: int, body: Any) -> Response[Any]:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)


def _conflict(message: str) -> Conflict:
    return Conflict(message, code="idempotency_conflict")


def effects_are_seeded(operation: str) -> bool:
    """Whether `operation`'s effects take their IDs from the claim's seed (`ids.effect_id`):
    StartRun (the run ID) and sends (each message's ID). Running such a request again finds
    what an earlier attempt did instead of doing it twice, so a repeat that waited
    `WAIT_SECONDS` for an unfinished claim takes it over rather than answering 409 for a
    minute (which a step's retries would not outlast: the run would fail)."""
    return operation == "POST /runs" or operation.endswith("/messages")


def record_pk(principal: Principal, operation: str, key: str) -> str:
    """The record of one Idempotency-Key. Scoped to the calling API key: a replay skips the
    request's permission checks, so one key's answer (e.g. a new key's secret) must never be
    answered to another key."""
    return f"IDEM#{principal.project_id}#{principal.key_id}#{operation}#{ids.sha256_hex(key)}"


def answer_once(
    principal: Principal,
    operation: str,
    key: str | None,
    body: Any,
    run: Callable[[], Answer],
) -> Response[Any]:
    """Run `run` (answering `(status, body)`) at most once per Idempotency-Key.

    `operation` names the call, e.g. `POST /apps`; `body` is the parsed request body.
    Without a key, `run` simply runs.
    """
    if key is None:
        return _response(*run())
    if not _KEY_RE.match(key):
        raise ValidationError("Idempotency-Key: 1 to 255 printable ASCII characters")
    pk = record_pk(principal, operation, key)
    digest = _request_hash(body)
    deadline = clock.monotonic() + WAIT_SECONDS
    stale_ms = int(WAIT_SECONDS * 1000) if effects_are_seeded(operation) else STALE_CLAIM_MS
    token, record = idempotency_store.claim(
        pk, digest, TTL_SECONDS, stale_before_ms=clock.now_ms() - stale_ms
    )
    while token is None:
        assert record is not None
        if record.request_hash != digest:
            raise _conflict("this Idempotency-Key was used with a different request body")
        if record.status is not None:
            if not record.body_kept or record.body is None:
                raise _conflict(
                    "this Idempotency-Key already succeeded; its answer was too large to "
                    "keep, read the resource instead"
                )
            return _response(record.status, _unseal(key, pk, record.body))
        if clock.monotonic() >= deadline:
            raise _conflict("a request with this Idempotency-Key is still in progress; retry")
        time.sleep(_POLL_SECONDS)
        # Poll by reading (a conditional put that fails still costs a write, and may be
        # throttled): claim again only once the claim is gone, released or stale.
        seen = idempotency_store.get(pk)
        if seen is None or _claimable(seen, digest, clock.now_ms() - stale_ms):
            token, record = idempotency_store.claim(
                pk, digest, TTL_SECONDS, stale_before_ms=clock.now_ms() - stale_ms
            )
        else:
            record = seen
    assert record is not None
    try:
        # Effects derive their IDs from the claim's seed (the same after a takeover): a
        # request that died between its effect and its answer is found again, not repeated.
        with ids.effects_seeded(record.seed):
            status, answer = run()
    except BaseException:
        idempotency_store.release(pk, token)
        raise
    _finish(pk, token, status, _seal(key, pk, token, answer))
    return _response(status, answer)


def _claimable(record: idempotency_store.IdempotencyRecord, digest: str, stale_before: int) -> bool:
    """Whether an unfinished record may be claimed now: released, or stale for this body."""
    if record.status is not None:
        return False
    stale = record.claimed_at_ms < stale_before and record.request_hash == digest
    return record.claimed_at_ms == 0 or stale


def _finish(pk: str, token: str, status: int, sealed: bytes) -> None:
    """Store the answer, retrying a failed write a few times. The request's effect has
    happened (SQS holds the messages): failing now would make the caller resend, and a
    resend must find this answer, so the write is retried rather than the request failed.
    If it still fails, the caller gets its answer anyway and the claim stays unfinished
    (a resend meanwhile is told to retry; see docs/guarantees.md for the one window left)."""
    for pause in FINISH_RETRY_SECONDS:
        try:
            idempotency_store.finish(pk, token, status, sealed)
            return
        except Exception as err:  # a throttle or a network error: the claim still stands
            log.warning("idempotency record %s: storing the answer failed: %s", pk[:40], err)
            time.sleep(pause)
    try:
        idempotency_store.finish(pk, token, status, sealed)
    except Exception:
        log.exception("idempotency record %s: the answer could not be stored", pk[:40])
