"""The engine's side of the invocation protocol (docs/protocol.md), in one package: what is
parsed once at the edge and what is answered. Pure (no boto3, no I/O). The SDK's mirror is
``ezgh_workflows._internal.protocol``; tests/unit/test_protocol_mirror.py holds the two to
the same version, op names and outcome kinds.

- `PROTOCOL_VERSION` (here): the version both the invoke and the sync request carry.
- `protocol.ops`: a step call's ops (``start``, ``complete``, ``fail``, ``record``,
  ``callback``, ``cancel``, ``reject``) as typed requests, checked once (`parse_op`).
- `protocol.results`: what a step op answers (``started``, ``ok``, ``retry``, ``recorded``).
- `protocol.outcomes`: an invocation's answer (``completed``, ``failed``, ``suspended``, ...).

The invoke request itself is built by `service.wire` (it reads payloads and callback URLs).
"""

from __future__ import annotations

PROTOCOL_VERSION = "1.4"

__all__ = ["PROTOCOL_VERSION"]
