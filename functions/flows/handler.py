"""The flows Lambda: EzFlow's graph interpreter (the push app `ezgh-flows`) at its function URL.

The engine calls it as it calls any push app: signed sync and invoke requests. Its signing key
is derived from the token secret (interpreter/hosting.py), read on the first request.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine.interpreter.app import ezgh_flows
from ezgh_engine.interpreter.hosting import signing_key


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answer one signed request of the engine (anything else is 401, as for any push app)."""
    if not ezgh_flows.signing_key:
        ezgh_flows.signing_key = signing_key()
    return ezgh_flows.lambda_handler(event, context)
