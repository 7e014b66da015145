"""API keys: who is calling, what a key may do, and managing keys.

Rules for managing keys (the contract leaves them to us):

- **create**: any key of the project, but only with permissions it holds itself: each
  requested `(action, resource)` must be included in one of the caller's grants (`*`
  includes every action; a grant without a resource includes every resource; a request
  without a resource needs a grant without one; a scoped one, a grant on the same resource
  of the same kind, `core.grants`). Anything more is `403 forbidden`, so a key can never
  mint a stronger key. A resource qualified by a kind its action does not act on
  (`queues.messages.send` on `flow:x`) is `400 validation_error`.
  A new key records the key that minted it (`createdBy`); the project holds at most
  `api_keys_store.MAX_API_KEYS` keys minted this way (`409 invalid_state` past it). A name is
  1 to 128 printable ASCII characters and never the bootstrap key's, nor anything that reads
  like it (`bootstrap` in any case or spacing), so no key can pass for the operator's.
- **list**: a page of the keys the caller may manage (every permission of the key one the
  caller includes, as for creating or revoking it): an admin key sees every key; a scoped
  key, those no stronger than itself (itself included). Answers carry no secrets: they are
  not stored.
- **delete**: the caller must cover every permission of the key it deletes, so a limited key
  cannot revoke the admin key. Deletion takes effect at once (reads are consistent), for the
  key and for every key it minted, transitively (`api_keys_store`). A key may not revoke one
  of its own creators (403): that would revoke it and every key of its creator's tree, so a
  minted key, leaked, cannot take down the keys its creator minted besides it.
"""

from __future__ import annotations

import re
import uuid

from ezgh_engine import ids
from ezgh_engine.adapters import api_keys_store, registry_store
from ezgh_engine.adapters.api_keys_store import ApiKey, Permission
from ezgh_engine.core.grants import Grant
from ezgh_engine.core.models import Principal
from ezgh_engine.errors import Forbidden, NotFound, Unauthorized, ValidationError

ADMIN_PERMISSIONS: tuple[Permission, ...] = (("*", None),)
_BOOTSTRAP_KEY_NAME = "admin (bootstrap)"
_KEY_NAME_RE = re.compile(r"^[\x20-\x7e]{1,128}$")


def authenticate(authorization: str | None) -> Principal:
    """The principal of an `Authorization: Bearer <api key>` header; 401 otherwise."""
    if not authorization:
        raise Unauthorized("missing Authorization header (Bearer <api key>)")
    scheme, _, secret = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <api key>'")
    key = api_keys_store.find_api_key(secret.strip())
    if key is None:
        raise Unauthorized("unknown or revoked API key")
    return key.principal()


def check_project(principal: Principal, org_id: str, project_id: str) -> None:
    """404 unless the path's organization and project are the key's own.

    Not 403: a key must not learn whether another project exists.
    """
    if (org_id.lower(), project_id.lower()) != (principal.org_id, principal.project_id):
        raise NotFound(f"project {project_id} not found in organization {org_id}")


def covers(principal: Principal, action: str, resource: str | None) -> bool:
    """Whether the principal holds `(action, resource)`; no resource means all resources,
    which only an unscoped grant covers (`Principal.allows`)."""
    return principal.allows(action, resource)


def _check_kinds(permissions: tuple[Permission, ...]) -> None:
    """A resource qualified by a kind its action does not act on is a mistake: 400."""
    for action, resource in permissions:
        problem = Grant.of(action, resource).kind_error()
        if problem:
            raise ValidationError(f"permissions: resource {resource!r}: {problem}")


def _require_covered(principal: Principal, permissions: tuple[Permission, ...], verb: str) -> None:
    for action, resource in permissions:
        if not principal.includes(action, resource):
            scope = f" on {resource!r}" if resource is not None else ""
            raise Forbidden(
                f"cannot {verb} a key with {action!r}{scope}: this key does not hold it"
            )


def check_key_name(name: str) -> str:
    """A new key's name: 1 to 128 printable ASCII characters, not blank, and nothing that
    reads like the bootstrap key's (`bootstrap` in its letters, whatever the case, spacing
    or punctuation): 400 otherwise."""
    if not _KEY_NAME_RE.match(name) or not name.strip():
        raise ValidationError("name: 1 to 128 printable ASCII characters, not only spaces")
    if "bootstrap" in "".join(c for c in name.casefold() if c.isalnum()):
        raise ValidationError(
            f"name: {name!r} reads like the bootstrap key's name, which only `ezgh bootstrap` "
            "and `ezgh dev` give"
        )
    return name


def create_api_key(
    principal: Principal, *, name: str, permissions: tuple[Permission, ...]
) -> tuple[ApiKey, str]:
    """Create a key no stronger than the caller's, minted by it; answers the record and the
    secret."""
    check_key_name(name)
    _check_kinds(permissions)
    _require_covered(principal, permissions, "create")
    return api_keys_store.create_api_key(
        principal.org_id, principal.project_id, name, permissions, creator=principal
    )


def _manages(principal: Principal, key: ApiKey) -> bool:
    return all(principal.includes(action, resource) for action, resource in key.permissions)


def list_api_keys(
    principal: Principal, *, limit: int = 20, cursor: str | None = None
) -> tuple[list[ApiKey], str | None]:
    """A page of the keys the caller may manage (no secrets), and the next page's cursor."""
    if not 1 <= limit <= 100:
        raise ValidationError("limit must be from 1 to 100")
    return api_keys_store.list_api_keys(
        principal.project_id, limit=limit, cursor=cursor, keep=lambda k: _manages(principal, k)
    )


def delete_api_key(principal: Principal, key_id: str) -> None:
    """Revoke a key the caller is at least as strong as, and every key it minted."""
    key = api_keys_store.get_api_key(principal.project_id, key_id)
    if key is None:
        raise NotFound(f"API key {key_id} not found")
    _require_covered(principal, key.permissions, "delete")
    if key.id in principal.key_chain:
        raise Forbidden(
            f"API key {key.id} minted this key (or one of its creators): revoking it would "
            "revoke every key it minted, this one too; revoke it with a key it did not mint"
        )
    api_keys_store.delete_api_key(principal.project_id, key_id)


def _normal_uuid(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError as err:
        raise ValidationError(f"{text!r} is not a UUID") from err


def bootstrap_admin(
    org_id: str | None = None, project_id: str | None = None
) -> tuple[str, str, str]:
    """Make sure the project exists and mint an admin key (`[{"action": "*"}]`) for it.

    Answers `(org_id, project_id, api_key)`. Safe to call on every local start: the project
    is created once (an existing project keeps its organization when `org_id` is omitted);
    each call mints a new key, because only the hashes of earlier ones are stored.
    """
    project_id = _normal_uuid(project_id) if project_id else ids.new_id()
    if org_id is not None:
        org_id = _normal_uuid(org_id)
    else:
        org_id = registry_store.get_project_org(project_id) or ids.new_id()
    registry_store.ensure_project(org_id, project_id)
    _, secret = api_keys_store.create_api_key(
        org_id, project_id, _BOOTSTRAP_KEY_NAME, ADMIN_PERMISSIONS
    )
    return org_id, project_id, secret
