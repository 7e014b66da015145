"""The engine's side of the invocation protocol (docs/protocol.md), in one package: what is
parsed once at the edge and what is answered. Pure (no boto3, no I/O). The SDK's mirror is
``ezgh_workflows._internal.protocol``; tests/unit/test_protocol_mirror.py holds the two to
the same version, op names and outcome kinds.

- `PROTOCOL_VERSION` (here): the newest version the engine speaks, which the sync request
  carries; `spoken_with` the version an invoke request to an app is written in (the app's
  own, as its sync or its workers' announce said, up to the engine's).
- `protocol.ops`: a step call's ops (``start``, ``complete``, ``fail``, ``record``,
  ``callback``, ``cancel``, ``reject``) as typed requests, checked once (`parse_op`).
- `protocol.results`: what a step op answers (``started``, ``ok``, ``retry``, ``recorded``).
- `protocol.outcomes`: an invocation's answer (``completed``, ``failed``, ``suspended``, ...).

- `protocol.bounds`: how large an invoke request, a history page and a value may be where
  AWS carries them (1.5: references and pages instead of one request of any size).

The invoke request itself is built by `service.wire` (it reads payloads and callback URLs).
"""

from __future__ import annotations

PROTOCOL_VERSION = "1.5"
# The version an app that never said one is served (an app synced or announced before the
# engine recorded versions: its SDK spoke 1.4 or earlier, and got 1.4 requests).
ASSUMED_VERSION = "1.4"
# From 1.5 an invoke request may carry values as references and its history in pages
# (`inputRef`, a step's `outputRef`, `stepsCursor`): only an app that speaks 1.5 gets them.
REFERENCES_SINCE = (1, 5)

__all__ = ["ASSUMED_VERSION", "PROTOCOL_VERSION", "REFERENCES_SINCE", "spoken_with"]


def version_tuple(version: object) -> tuple[int, ...]:
    """``"1.5"`` → ``(1, 5)``; anything unreadable counts as ``(0,)``."""
    if not isinstance(version, str):
        return (0,)
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return (0,)


def spoken_with(app_version: str | None) -> str:
    """The version of the invoke requests an app gets: the engine's own when the app speaks
    1.5 or later (as its sync answer or its workers' announce said), else the 1.4 request
    every app got before 1.5 (an SDK before 1.4 reads it as it always did)."""
    if version_tuple(app_version) >= REFERENCES_SINCE:
        return PROTOCOL_VERSION
    return ASSUMED_VERSION


def takes_references(version: str) -> bool:
    """Whether requests of `version` may carry references and pages (1.5 and later)."""
    return version_tuple(version) >= REFERENCES_SINCE
