"""Step retry backoff (docs/protocol.md, "Retries"). Pure: the jitter is passed in."""

from __future__ import annotations

BASE_SECONDS = 1.0
FACTOR = 2.0
MAX_DELAY_SECONDS = 600.0


def delay_seconds(attempt: int, jitter: float) -> float:
    """Seconds before the attempt after failed `attempt` (from 1): exponential from 1 s,
    capped at 10 minutes, then scaled by a random factor in [0.5, 1) ("equal jitter"), so
    steps that failed together don't all come back at the same moment."""
    ceiling = min(MAX_DELAY_SECONDS, BASE_SECONDS * FACTOR ** max(0, attempt - 1))
    return ceiling * (0.5 + 0.5 * jitter)
