"""What each function may touch: the one place least privilege is decided.

Keys are topology keys (functions, tables, queues), checked against the topology when the
stack is built, so a renamed or new function fails synth instead of running without grants.
Consuming a queue through its event source mapping grants receive, delete and
change-visibility on that queue by itself; this table lists what the handler code calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Level = Literal["read", "read_write"]


@dataclass(frozen=True)
class Access:
    tables: dict[str, Level] = field(default_factory=dict)
    payloads: Level | None = None
    send_to: tuple[str, ...] = ()  # queue keys the function sends messages to
    schedules: bool = False  # create/delete timer schedules (and pass the scheduler role)
    token_secret: bool = False  # read the invocation-token HMAC key


ACCESS: dict[str, Access] = {
    # Public API: runs, apps, keys and idempotency records; large values; wakes runs up.
    "api": Access(
        tables={"runs": "read_write", "registry": "read_write"},
        payloads="read_write",
        send_to=("invocations",),
        token_secret=True,  # verifies the invocation tokens on step calls
    ),
    # The outbox: turns committed changes into invocation messages and timers. It reads the
    # stream (granted by its event source), never the tables.
    "stream": Access(send_to=("invocations",), schedules=True),
    # Calls the app: reads apps, leases and updates runs, re-sends early timers.
    "invoker": Access(
        tables={"runs": "read_write", "registry": "read"},
        payloads="read_write",
        send_to=("invocations",),
        schedules=True,
        token_secret=True,  # mints the invocation token it hands the app
    ),
}
