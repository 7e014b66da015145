"""Canonical forms of protocol documents, so exchanges recorded on one run compare with
another's: IDs, times, tokens and URLs differ by run, the rest must not.

- every UUID becomes ``00000000-0000-4000-8000-<n>``, numbered by first appearance (one
  `Canon` per exchange, fed in the order the documents happened), and back again;
- every ISO time becomes `TIME` (so races, which order by time, are not golden material),
  but a sleep step's `wakeAt` becomes its distance from its `startedAt` (`"+3600s"`): the
  duration is what the engine must get right;
- tokens and invocation IDs become placeholders, and so does an invoke request's `trace`
  (derived from the run and invocation IDs: tests/unit/test_trace_ids.py holds its form);
  the engine's URL becomes `ENGINE_URL`;
- a history cursor (protocol 1.5: sealed, random) becomes ``<cursor-n>``, numbered by first
  appearance as IDs are, and back again;
- a long string of one repeated character (a large value) becomes ``<'x' * 70000>``, and
  back again, so a recording of a value kept in S3 stays short.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
LOOPBACK_URL = re.compile(r"http://127\.0\.0\.1:\d+")
CURSOR = re.compile(r"^c1\.[A-Za-z0-9_-]+$")
CANONICAL_CURSOR = re.compile(r"^<cursor-\d+>$")
REPEATED = re.compile(r"^(.)\1{999,}$", re.DOTALL)
CANONICAL_REPEATED = re.compile(r"^<'(.)' \* (\d+)>$", re.DOTALL)
TIME = "2026-01-01T00:00:00.000Z"
ENGINE_URL = "http://127.0.0.1:1"
TOKEN = "<token>"
INVOCATION = "<invocation>"
TRACE = "<trace>"
_SECRET_KEYS = {"token": TOKEN, "invocationId": INVOCATION}


def canonical_uuid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


class Canon:
    """One exchange's mapping between its real IDs and canonical ones."""

    def __init__(self) -> None:
        self.forward: dict[str, str] = {}
        self.backward: dict[str, str] = {}

    def seed(self, real: str, canonical: str) -> None:
        """Map `real` to `canonical` (a replay meeting a recorded canonical ID)."""
        self.forward[real] = canonical
        self.backward[canonical] = real

    def _uuid(self, match: re.Match[str]) -> str:
        real = match.group(0)
        if real not in self.forward:
            ids = sum(not CURSOR.match(known) for known in self.forward)
            self.seed(real, canonical_uuid(ids + 1))
        return self.forward[real]

    def to_canonical(self, value: Any) -> Any:
        """`value` with its IDs, times, tokens and URLs in canonical form."""
        if isinstance(value, dict):
            value = _sleep_relative(value)
            return {
                key: _SECRET_KEYS[key]
                if key in _SECRET_KEYS and isinstance(item, str)
                else TRACE
                if key == "trace" and isinstance(item, dict) and "traceparent" in item
                else self.to_canonical(item)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [self.to_canonical(item) for item in value]
        if isinstance(value, str):
            if CURSOR.match(value):
                return self._cursor(value)
            if REPEATED.match(value):
                return f"<{value[0]!r} * {len(value)}>"
            text = UUID.sub(self._uuid, value)
            text = ISO_TIME.sub(TIME, text)
            return LOOPBACK_URL.sub(ENGINE_URL, text)
        return value

    def _cursor(self, real: str) -> str:
        if real not in self.forward:
            cursors = sum(bool(CURSOR.match(known)) for known in self.forward)
            self.seed(real, f"<cursor-{cursors + 1}>")
        return self.forward[real]

    def to_real(self, value: Any) -> Any:
        """A canonical document with the IDs this replay met put back (unknown ones kept)."""
        if isinstance(value, dict):
            return {key: self.to_real(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.to_real(item) for item in value]
        if isinstance(value, str):
            if CANONICAL_CURSOR.match(value):
                return self.backward.get(value, value)
            repeated = CANONICAL_REPEATED.match(value)
            if repeated:
                return repeated.group(1) * int(repeated.group(2))
            return UUID.sub(self._real_uuid, value)
        return value

    def _real_uuid(self, match: re.Match[str]) -> str:
        canonical = match.group(0)
        if canonical not in self.backward:
            # An ID the recorded side made up (a `uuid` step's value): it is its own real ID.
            self.seed(canonical, canonical)
        return self.backward[canonical]


def _sleep_relative(step: dict[str, Any]) -> dict[str, Any]:
    wake, started = step.get("wakeAt"), step.get("startedAt")
    if step.get("kind") != "sleep" or not isinstance(wake, str) or not isinstance(started, str):
        return step
    try:
        delta = datetime.fromisoformat(wake) - datetime.fromisoformat(started)
    except ValueError:
        return step
    return {**step, "wakeAt": f"+{round(delta.total_seconds())}s"}
