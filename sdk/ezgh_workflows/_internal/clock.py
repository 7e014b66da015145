"""The only place in the SDK that reads the time or makes randomness.

Everything else calls these functions through the module (``clock.now()``), so tests can
replace them with ``monkeypatch.setattr(clock, "now", ...)`` instead of sleeping.
"""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime


def now() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(UTC)


def unix_seconds() -> float:
    """Seconds since the epoch (for request signatures)."""
    return time.time()


def monotonic() -> float:
    """Seconds from an arbitrary origin, for measuring durations only."""
    return time.monotonic()


def random_fraction() -> float:
    """A uniform random number in [0, 1) (retry jitter)."""
    return random.random()


def new_uuid() -> str:
    """A random UUID (version 4) as a string."""
    return str(uuid.uuid4())


def random_source(seed: int | None = None) -> random.Random:
    """A source of random numbers: repeatable with a ``seed`` (the test kit's IDs and retry
    jitter), else seeded by the operating system."""
    return random.Random(seed)
