"""The API key an action the engine takes by itself acts for: a schedule's fire, a queue
subscription's delivery.

Nothing the engine starts on its own acts with more than the principal behind it. A
schedule and a subscription record the key that created or last changed them (`keyId`);
each fire and each delivery reads that key again, with its chain of creators (the read
authentication makes, `api_keys_store.get_api_key`, as this environment made it at most
`api_keys_store.KEY_CACHE_SECONDS` ago), and it must still hold what creating the schedule
or the subscription required. A revoked key, or one that no longer holds it, starts or
delivers nothing: `403 forbidden`, which the fire records as the schedule's `lastError` and
the delivery as the subscription's `status`.

A schedule or a subscription made before the engine recorded keys has none: it acts as
before until it is changed, which records the changer's key (docs/architecture.md, "API key
permissions", says why).
"""

from __future__ import annotations

from dataclasses import dataclass

from ezgh_engine.adapters import api_keys_store
from ezgh_engine.errors import Forbidden

Need = tuple[str, str]  # (action, resource)


@dataclass(frozen=True)
class ActingKey:
    """The key `holder` (`schedule <id>`, `subscription <id>`) acts for; `key_id` None: it
    records none (made before keys were recorded)."""

    project_id: str
    key_id: str | None
    holder: str

    def require(self, *needs: Need) -> None:
        """403 unless the key is live (it and its creators) and holds every one of `needs`;
        nothing to check for a holder that records no key."""
        if self.key_id is None:
            return
        key = api_keys_store.get_api_key_cached(self.project_id, self.key_id)
        if key is None:
            raise Forbidden(f"the API key {self.key_id} {self.holder} acts for is revoked")
        principal = key.principal()
        for action, resource in needs:
            if not principal.allows(action, resource):
                raise Forbidden(
                    f"the API key {self.key_id} {self.holder} acts for may not {action} on "
                    f"{resource}"
                )
