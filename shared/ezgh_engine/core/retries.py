"""Step retry backoff (docs/protocol.md, "Retries"). Pure: the jitter is passed in.

The formula is a decision both sides know (the SDK's test kit skips its clock over the same
waits), so it lives in `core.protocol_rules`, which the SDK ships a copy of.
"""

from __future__ import annotations

from ezgh_engine.core import protocol_rules

BASE_SECONDS = protocol_rules.RETRY_BASE_SECONDS
FACTOR = protocol_rules.RETRY_FACTOR
MAX_DELAY_SECONDS = protocol_rules.RETRY_MAX_DELAY_SECONDS
delay_seconds = protocol_rules.retry_delay_seconds
