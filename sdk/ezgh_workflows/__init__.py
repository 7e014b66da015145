"""EZGH Workflows and EZGH Queues: the Python SDK.

```python
from ezgh_workflows import Context, PushApp, workflow

@workflow("onboarding")
async def onboarding(ctx: Context) -> None:
    user = await ctx.step.run("load-user", lambda: load_user(ctx.input["userId"]))
    await ctx.step.sleep("cooldown", "3d")

app = PushApp([onboarding])  # serve with uvicorn, or use app.lambda_handler
```

`ezgh_workflows.testing` runs workflows in process on a clock that skips (docs/testing.md);
`Replayer` replays recorded histories against the current code.
"""

from ._internal.api import ApiError
from ._internal.clients import QueuesClient, WorkflowsClient
from ._internal.context import Context
from ._internal.errors import NonRetryableError, RunCancelledError, StepError
from ._internal.history import RunHistory
from ._internal.protocol import SDK_VERSION as __version__
from ._internal.push_app import PushApp
from ._internal.replay import Replayer
from ._internal.step_context import StepContext, step_context
from ._internal.steps import BlockingCallback, BlockingSteps, Callback, Steps
from ._internal.trace import TraceContext
from ._internal.worker import Worker
from ._internal.workflow import Workflow, workflow

__all__ = [
    "ApiError",
    "BlockingCallback",
    "BlockingSteps",
    "Callback",
    "Context",
    "NonRetryableError",
    "PushApp",
    "QueuesClient",
    "Replayer",
    "RunCancelledError",
    "RunHistory",
    "StepContext",
    "StepError",
    "Steps",
    "TraceContext",
    "Worker",
    "Workflow",
    "WorkflowsClient",
    "__version__",
    "step_context",
    "workflow",
]
