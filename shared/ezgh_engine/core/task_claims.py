"""A pull task's claim on its run, and the API key a polled task acts for. Pure.

A pull app's task is claimed on its run item (`service.pull.set_lease`, attribute `tc`:
`<epoch>/<seq>/<claim>`) by whoever received it, so a task SQS delivered twice runs once.
A task handed out by `POST /apps/{app}/tasks/poll` is received by an API key: its claim
names that key (`key/<keyId>/<unique>`), and the code that runs the task acts for that key,
not for a broader one (`service.app_authority`): nothing a polled task's code does acts with
more than the key that polled it. A worker that reads its task queue directly claims the
task with a name of its own, which may never take that form (`check_worker_claim`); its
code acts for the app's key (`App.key_id`).
"""

from __future__ import annotations

KEY_CLAIM_PREFIX = "key/"
CLAIM_MAX = 128


def poll_claim(key_id: str, unique: str) -> str:
    """The claim of a task polled by `key_id` (`unique`: new for each receipt)."""
    return f"{KEY_CLAIM_PREFIX}{key_id}/{unique}"


def check_worker_claim(claim: str) -> str | None:
    """Why a worker's own claim name is refused (None: it is fine): the key form is the
    engine's, so no worker can name a key its task would act for."""
    if not (0 < len(claim) <= CLAIM_MAX and claim.isascii()):
        return f"claim: a string of 1 to {CLAIM_MAX} ASCII characters"
    if claim.startswith(KEY_CLAIM_PREFIX):
        return f"claim: may not begin with {KEY_CLAIM_PREFIX!r}"
    return None


def polled_key(stored: object, epoch: int) -> str | None:
    """The key that polled the task of lease `epoch`, from a run item's `tc` (None: no
    task of that lease was polled through the API, or none is claimed)."""
    if not isinstance(stored, str):
        return None
    claimed_epoch, _, rest = stored.partition("/")
    _seq, _, claim = rest.partition("/")
    if claimed_epoch != str(epoch) or not claim.startswith(KEY_CLAIM_PREFIX):
        return None
    key_id, sep, _unique = claim[len(KEY_CLAIM_PREFIX) :].partition("/")
    return key_id if sep and key_id else None
