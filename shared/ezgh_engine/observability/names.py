"""The engine's metrics: their names, units and dimensions (one truth for the emitters, the
dashboard in `infra/` and the bench's prices).

Every metric has the dimension `service` (the stack's name, `config.stack_prefix()`), and the
queue metrics `Queue` too: nothing per run, app or workflow, since CloudWatch bills each
name and dimension values pair as one metric ($0.30 a month, prorated by the hours it is
sent). `SERIES` counts them: the most a stack pays for its metrics in a busy month.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE = "EZGH"
ENV_NAMESPACE = "POWERTOOLS_METRICS_NAMESPACE"


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # CloudWatch's: Count, Milliseconds, Seconds
    what: str
    per_queue: bool = False


RUNS_STARTED = Metric("RunsStarted", "Count", "runs started (a retried run again)")
RUNS_ENDED = {
    "completed": Metric("RunsCompleted", "Count", "runs that ended completed"),
    "failed": Metric("RunsFailed", "Count", "runs that ended failed"),
    "cancelled": Metric("RunsCancelled", "Count", "runs that ended cancelled"),
    "timedOut": Metric("RunsTimedOut", "Count", "runs that ended timed out"),
}
RUN_DURATION = Metric("RunDuration", "Milliseconds", "a run's start to its end")
STEP_DURATION = Metric("StepDuration", "Milliseconds", "a step's attempt, start to end")
STEP_RETRIES = Metric("StepRetries", "Count", "failed step attempts that will be retried")
INVOCATION_LATENCY = Metric("InvocationLatency", "Milliseconds", "the app's answer time")
INVOCATION_FAILURES = Metric(
    "InvocationFailures", "Count", "invocations the app did not answer (unreachable, timeout)"
)
THROTTLES = Metric("Throttles", "Count", "AWS requests the engine's clients found throttled")
QUEUE_AGE = Metric(
    "QueueAge", "Seconds", "a message's wait from its send to its receipt", per_queue=True
)
REDELIVERIES = Metric(
    "Redeliveries", "Count", "messages received again (a handler failed or held them)", True
)

ALL: tuple[Metric, ...] = (
    RUNS_STARTED,
    *RUNS_ENDED.values(),
    RUN_DURATION,
    STEP_DURATION,
    STEP_RETRIES,
    INVOCATION_LATENCY,
    INVOCATION_FAILURES,
    THROTTLES,
    QUEUE_AGE,
    REDELIVERIES,
)
# The `Queue` dimension's values: the engine's two queues and its subscriptions' queues.
QUEUES = ("invocations", "notifications", "subscriptions")
SERIES = sum(len(QUEUES) if m.per_queue else 1 for m in ALL)
