"""How the engine signs its calls to its interpreter, the `flows` function
(topology.FLOWS_FUNCTION): with one key derived from the stack's token secret, so the one
function verifies the engine's calls for every project without a lookup, and no key is ever
handed out or stored (the interpreter app has no record: service/flow_hosting.py). Whoever
holds the token secret can mint invocation tokens anyway; the derived key adds no power to
it.
"""

from __future__ import annotations

import hashlib
import hmac

from ezgh_engine.config import settings

# Changing this changes every project's key (the records would need registering again).
_CONTEXT = b"ezgh-flows push-app signing key v1"


def signing_key() -> str:
    """The interpreter app's signing key (the same in every function of one stack)."""
    secret = settings().token_secret.encode()
    return hmac.new(secret, _CONTEXT, hashlib.sha256).hexdigest()
