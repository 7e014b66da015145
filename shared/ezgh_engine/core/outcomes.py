"""Moved to `ezgh_engine.protocol.outcomes` (issue 19: the protocol in one package); these
names stay importable from here for the modules and tests that read them by this path."""

from ezgh_engine.protocol.outcomes import (
    MAX_MESSAGE_WAIT,
    MAX_SLEEP,
    WAIT_KINDS,
    MalformedOutcome,
    Outcome,
    SleepWait,
    Wait,
    parse,
)

__all__ = [
    "MAX_MESSAGE_WAIT",
    "MAX_SLEEP",
    "WAIT_KINDS",
    "MalformedOutcome",
    "Outcome",
    "SleepWait",
    "Wait",
    "parse",
]
