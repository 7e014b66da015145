"""Run errors the engine itself ends a run with, named once for every module that may."""

from __future__ import annotations

from ezgh_engine.core.models import RunError

APP_DELETED = RunError("workflows.app_deleted", "AppDeleted", "the run's app was deleted")

# At most this many steps may be pending at once in a run (waits, sleeps, parallel steps a
# suspend lists): what a suspend starts is made by one stream invocation, and every
# invocation replays and lists them all. Temporal allows 2,000 pending activities a
# workflow, Inngest 1,000 steps a function run (docs/guarantees.md, "Limits").
MAX_PENDING_STEPS = 2_000


def too_many_pending_steps(count: int) -> RunError:
    """The error a run ends with when a suspend lists more pending steps than allowed."""
    return RunError(
        "workflows.too_many_pending_steps",
        "TooManyPendingSteps",
        f"{count} steps pending at once; a run may have at most {MAX_PENDING_STEPS:,} "
        "(await them in smaller groups)",
    )
