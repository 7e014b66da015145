"""The only place in the engine that makes identifiers and reads randomness."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
import uuid
from collections.abc import Iterator
from contextvars import ContextVar

from ezgh_engine import clock

# Namespace for identifiers derived from their cause (child runs, scheduled runs, queue starts):
# the same cause always gives the same ID, so "exactly one start" is a conditional put.
_DERIVED_NS = uuid.UUID("6f1d3c52-7a2e-4b8e-9f0a-4e5a1b2c3d4e")


def new_id() -> str:
    """A new random UUID (v4) as a string."""
    return str(uuid.uuid4())


_order_lock = threading.Lock()
_last_order = (0, 0)  # (milliseconds, counter) of the last time-ordered ID


def time_ordered_id() -> str:
    """A UUIDv7-shaped ID that sorts by creation time (events, step order).

    Within a process IDs strictly increase, even within one millisecond: the 12 bits after
    the version count up (RFC 9562's "fixed-length dedicated counter").
    """
    global _last_order
    with _order_lock:
        ms, counter = clock.now_ms() & ((1 << 48) - 1), 0
        last_ms, last_counter = _last_order
        if ms <= last_ms:
            ms, counter = last_ms, last_counter + 1
            if counter > 0xFFF:
                ms, counter = last_ms + 1, 0
        _last_order = (ms, counter)
    rand = int.from_bytes(secrets.token_bytes(8), "big") & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62) | rand
    return str(uuid.UUID(int=value))


def time_bound(ms: int) -> str:
    """The smallest time-ordered ID of millisecond `ms` (every ID minted at or after `ms`
    sorts after it, every one minted before sorts before it): for ranges of IDs by time."""
    return str(uuid.UUID(int=(max(0, ms) & ((1 << 48) - 1)) << 80))


def derived_id(*parts: str) -> str:
    """A UUID (v5) derived from its cause; the same parts always give the same ID."""
    return str(uuid.uuid5(_DERIVED_NS, "\x1f".join(parts)))


# The seed of the request running under an Idempotency-Key (`api.idempotency`): the same on
# every attempt of that key, a takeover of a request that died included.
_effect_seed: ContextVar[str | None] = ContextVar("ezgh_effect_seed", default=None)


@contextlib.contextmanager
def effects_seeded(seed: str) -> Iterator[None]:
    """Inside the block, `effect_id` derives IDs from `seed` instead of minting them."""
    reset = _effect_seed.set(seed)
    try:
        yield
    finally:
        _effect_seed.reset(reset)


def effect_id(*parts: str) -> str | None:
    """The ID of an effect (a run, a message) of the request running under an
    Idempotency-Key, derived from its seed and `parts`: a resend that runs the request again
    after the first died between its effect and its answer makes the same IDs, so it finds
    the first attempt's effect instead of making a second. None outside such a request."""
    seed = _effect_seed.get()
    return derived_id("effect", seed, *parts) if seed is not None else None


def secret_token(nbytes: int = 32) -> str:
    """An unguessable URL-safe token (at least 128 bits for any nbytes >= 16)."""
    return secrets.token_urlsafe(nbytes)


def random_fraction() -> float:
    """A uniform random number in [0, 1) (retry jitter)."""
    return secrets.randbits(53) / (1 << 53)


def slug(prefix: str) -> str:
    """A short public handle such as `wfa_3k9x...`."""
    return f"{prefix}_{secrets.token_hex(8)}"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
