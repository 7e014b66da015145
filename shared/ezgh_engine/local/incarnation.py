"""Which life of the local engine a thread works for, so a restart can kill the old one.

AWS keeps DynamoDB, SQS, S3 and Scheduler when a Lambda dies; only the function's process
is gone, with whatever it had not written yet. `LocalRuntime.restart_engine()` plays that:
it starts a new life (`bump()`) and from then on any AWS call from a thread still working
for an older life raises `EngineRestarted`, so a handler that was mid-way writes nothing
more (its message comes back as SQS redelivers it). Threads are marked where work begins
(`marked`: a handler call, a poller's loop and batches). Python threads cannot be killed;
dying at the next AWS call is the closest honest stand-in.

Nothing is registered until the first restart: zero cost otherwise.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ezgh_engine.adapters import aws

_lock = threading.Lock()
_current = 0
_local = threading.local()
_guard_stop: Any = None


class EngineRestarted(Exception):
    """The engine this thread worked for was restarted: its process is gone."""


def current() -> int:
    return _current


@contextlib.contextmanager
def marked(life: int) -> Iterator[None]:
    """Mark the calling thread as working for `life` while the block runs."""
    previous = getattr(_local, "life", None)
    _local.life = life
    try:
        yield
    finally:
        _local.life = previous


def dead() -> bool:
    """True when the calling thread works for a life that has ended."""
    life = getattr(_local, "life", None)
    return life is not None and life != _current


def bump() -> int:
    """End the current life and start the next; answer its number."""
    global _current, _guard_stop
    with _lock:
        _current += 1
        if _guard_stop is None:
            _guard_stop = aws.intercept(_guard)
        return _current


def _guard(service: str, operation: str, params: dict[str, Any]) -> None:
    if dead():
        raise EngineRestarted(f"{service}.{operation} from a restarted engine's thread")
