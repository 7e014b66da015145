"""A CloudWatch dashboard of what runs do (`-c ezgh:dashboard=true`; off by default).

Its graphs read the engine's own metrics (`ezgh_engine.observability.names`: namespace
`EZGH`, dimension `service` = the stack's name) and metrics AWS keeps for free (the queues'
oldest message, the functions' errors and throttles). A dashboard costs $3 a month past an
account's first three (bench/idle.py); off, the stack has none and it costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from ezgh_engine.observability import names

_PERIOD = Duration.minutes(1)
_WIDTH = 8


def _metric(
    metric: names.Metric, service: str, statistic: str, queue: str | None = None
) -> cloudwatch.Metric:
    dimensions = {"service": service, **({"Queue": queue} if queue else {})}
    return cloudwatch.Metric(
        namespace=names.NAMESPACE,
        metric_name=metric.name,
        dimensions_map=dimensions,
        statistic=statistic,
        period=_PERIOD,
        label=f"{metric.name} {queue or ''} {statistic}".replace("  ", " ").strip(),
    )


def _graph(title: str, metrics: list[cloudwatch.IMetric]) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=metrics, width=_WIDTH, height=6)


class Dashboard(Construct):
    """Runs by status, run and step durations, retries, invocation latency and failures,
    throttles, queue ages and redeliveries, and the functions' errors and throttles."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        name: str,
        service: str,
        queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
    ) -> None:
        super().__init__(scope, id)
        ended = [_metric(m, service, "Sum") for m in names.RUNS_ENDED.values()]
        widgets: list[cloudwatch.IWidget] = [
            _graph("Runs started and ended", [_metric(names.RUNS_STARTED, service, "Sum"), *ended]),
            _graph("Run duration (ms)", _percentiles(names.RUN_DURATION, service)),
            _graph("Step duration (ms)", _percentiles(names.STEP_DURATION, service)),
            _graph(
                "Step retries, invocation failures, throttles",
                [
                    _metric(m, service, "Sum")
                    for m in (names.STEP_RETRIES, names.INVOCATION_FAILURES, names.THROTTLES)
                ],
            ),
            _graph("Invocation latency (ms)", _percentiles(names.INVOCATION_LATENCY, service)),
            _graph("Queue age (s) and redeliveries", _queue_metrics(service, queues)),
            _graph(
                "Function errors and throttles",
                [m for f in functions.values() for m in (f.metric_errors(), f.metric_throttles())],
            ),
        ]
        self.dashboard = cloudwatch.Dashboard(self, "Runs", dashboard_name=name)
        for start in range(0, len(widgets), 3):
            self.dashboard.add_widgets(*widgets[start : start + 3])


def _percentiles(metric: names.Metric, service: str) -> list[cloudwatch.IMetric]:
    return [_metric(metric, service, s) for s in ("p50", "p99", "Maximum")]


def _queue_metrics(service: str, queues: Mapping[str, sqs.IQueue]) -> list[cloudwatch.IMetric]:
    mine = [_metric(names.QUEUE_AGE, service, "Maximum", q) for q in names.QUEUES]
    mine += [_metric(names.REDELIVERIES, service, "Sum", q) for q in names.QUEUES]
    oldest = [
        q.metric_approximate_age_of_oldest_message(period=_PERIOD, label=f"{key} oldest (s)")
        for key, q in queues.items()
    ]
    return [*mine, *oldest]
