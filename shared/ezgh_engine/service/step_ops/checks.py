"""Whether an invocation may still start or end steps: pure predicates on what the run item
(or a branch step's item) holds, and the reads that raise `StaleInvocation` on them.

A step's own conditions keep its records together; these checks stop, with half a read unit,
an invocation whose run ended, was taken over or that has answered, which the conditions
would otherwise only catch when it touched a step another invocation owns.
"""

from __future__ import annotations

from ezgh_engine import clock
from ezgh_engine.adapters import steps_store as store
from ezgh_engine.core import tokens
from ezgh_engine.core.models import LIVE_STATUSES
from ezgh_engine.errors import StaleInvocation

TAKEN_OVER = "the invocation's lease was taken over or the run ended"
ANSWERED = "the invocation has answered or its lease ended"
BRANCH_ANSWERED = "the branch invocation has answered or its lease ended"

RunState = tuple[str, int, int] | None  # the run's status, lease epoch, lease end (ms)


def run_refusal(state: RunState, claims: tokens.InvocationClaims, now_ms: int) -> str | None:
    """Why the run refuses this invocation's step writes (None: it may write). An ended run
    refuses any. A main invocation is refused by a newer epoch, and its token works while
    its lease does: once it has answered (`leaseUntil` 0) or its lease ran out, it starts
    and ends nothing. A branch invocation's epoch is its step's (`branch_refusal`), not
    comparable with the run's: the run need only be live."""
    if state is None or state[0] not in LIVE_STATUSES:
        return TAKEN_OVER
    if claims.step_id is not None:
        return None
    if state[1] > claims.epoch:
        return TAKEN_OVER
    if state[2] < now_ms:
        return ANSWERED
    return None


def branch_refusal(
    lease: tuple[int, int], claims: tokens.InvocationClaims, now_ms: int
) -> str | None:
    """Why a branch step's lease (`branchEpoch`, `branchLeaseUntil`) refuses the branch
    invocation's writes: another epoch holds it, or it was released or ran out."""
    epoch, until = lease
    if epoch != claims.epoch or until < now_ms:
        return BRANCH_ANSWERED
    return None


def taken_over(state: RunState, claims: tokens.InvocationClaims) -> bool:
    """The run ended or another epoch holds it (a lease that merely ran out still takes
    an answer, as the outcome's commit does)."""
    return state is None or state[0] not in LIVE_STATUSES or state[1] != claims.epoch


def check_live(claims: tokens.InvocationClaims) -> None:
    """`StaleInvocation` unless the run takes this invocation's step writes."""
    reason = run_refusal(store.run_state(claims.run_id), claims, clock.now_ms())
    if reason:
        raise StaleInvocation(reason)


def check_branch_live(claims: tokens.InvocationClaims) -> None:
    """`StaleInvocation` unless the branch invocation still holds its step's branch lease."""
    lease = store.branch_lease(claims.run_id, claims.step_id or "")
    reason = branch_refusal(lease, claims, clock.now_ms())
    if reason:
        raise StaleInvocation(reason)


def check_not_taken_over(claims: tokens.InvocationClaims) -> None:
    """`StaleInvocation` when the run ended or a newer epoch holds it."""
    if taken_over(store.run_state(claims.run_id), claims):
        raise StaleInvocation(TAKEN_OVER)
