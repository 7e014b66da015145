"""CloudWatch alarms: a message in any dead-letter queue, an error in any function."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

_PERIOD = Duration.minutes(5)


class Alarms(Construct):
    """One alarm per DLQ (any visible message) and per function (any error).

    Alarms only exist in the console unless `topic_arn` names an SNS topic to notify; the
    engine creates no topic of its own (a topic with no subscriber helps nobody).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dlqs: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
        topic_arn: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        action = (
            actions.SnsAction(sns.Topic.from_topic_arn(self, "Topic", topic_arn))
            if topic_arn
            else None
        )
        self.alarms: list[cloudwatch.Alarm] = []
        for name, dlq in dlqs.items():
            metric = dlq.metric_approximate_number_of_messages_visible(
                period=_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            )
            self._alarm(f"{name}DlqNotEmpty", metric, f"messages waiting in the {name} DLQ")
        for name, function in functions.items():
            metric = function.metric_errors(period=_PERIOD, statistic=cloudwatch.Stats.SUM)
            self._alarm(f"{name}Errors", metric, f"the {name} function raised errors")
        if action:
            for alarm in self.alarms:
                alarm.add_alarm_action(action)

    def _alarm(self, id: str, metric: cloudwatch.IMetric, what: str) -> None:
        self.alarms.append(
            cloudwatch.Alarm(
                self,
                id,
                metric=metric,
                threshold=0,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                # No data means no messages / no invocations: that is healthy, not unknown.
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=f"EZGH Workflows: {what}",
            )
        )
