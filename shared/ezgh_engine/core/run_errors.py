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


REQUEST_TOO_LARGE = "workflows.request_too_large"


def request_too_large(size: int, where: str) -> RunError:
    """The run's invoke request no longer reaches its app: the app speaks a protocol before
    1.5, whose request holds every recorded value inline, and `where` refused its `size`
    bytes (a pull task over SQS's 256 KiB, a push app's 413). The same request would be
    refused again; an app on an SDK speaking 1.5 reads large values and long histories
    itself (docs/protocol.md section 1.3), and RetryRun then resumes the run."""
    return RunError(
        REQUEST_TOO_LARGE,
        "RequestTooLarge",
        f"the run's invoke request of {size} bytes is too large for {where}; the app speaks "
        "a protocol before 1.5, which sends every recorded value inline: upgrade its SDK "
        "(protocol 1.5 sends large values as references and long histories in pages), "
        "then retry the run",
    )
