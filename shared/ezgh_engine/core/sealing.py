"""Sealing small values with AES-GCM under keys derived from the engine's secret.

Used where a value leaves the engine or sits in a table and must be neither readable nor
forgeable: list cursors (they hold a table's keys), app signing keys and subscription secrets
at rest. A sealed value is `nonce (12 bytes) || ciphertext || tag`; the associated data binds
it to where it belongs (a project and query, an item's key), so a sealed value copied
elsewhere does not open. Pure: the caller passes the secret and a fresh nonce.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12


def derive_key(secret: str, purpose: str) -> bytes:
    """A 256-bit key for one purpose (e.g. `cursor`), so one purpose's sealed values never
    open as another's."""
    return hmac.new(secret.encode(), b"ezgh-seal\x1f" + purpose.encode(), hashlib.sha256).digest()


def nonce_from(random_text: str) -> bytes:
    """A nonce from fresh random text (`ids.secret_token()`): never reuse one under a key."""
    return hashlib.sha256(random_text.encode()).digest()[:NONCE_BYTES]


def seal(key: bytes, plain: bytes, aad: bytes, nonce: bytes) -> bytes:
    """`plain` encrypted and authenticated, bound to `aad`."""
    return nonce + AESGCM(key).encrypt(nonce, plain, aad)


def unseal(key: bytes, sealed: bytes, aad: bytes) -> bytes | None:
    """The plain bytes, or None when `sealed` was altered, sealed under another key (a
    rotated secret, another purpose) or bound to other associated data."""
    if len(sealed) < NONCE_BYTES + 16:
        return None
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
    except InvalidTag:
        return None
