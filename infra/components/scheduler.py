"""EventBridge Scheduler: the group long timers live in, the role that delivers them, and
the stack's own recurring schedules (topology `Recurring`: the hourly year-limit sweep)."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from ezgh_engine.adapters.messages import SCHEDULER_RETRY
from ezgh_engine.topology import Recurring


class Scheduler(Construct):
    """A schedule group and a role Scheduler assumes to deliver timers.

    The role may send to the target queue (`sqs:SendMessage`: cron schedules, and timers
    made where the invoker's ARN is not known) and, granted by the stack, invoke the invoker
    function (`lambda:InvokeFunction`: long timers target it directly, so a timer costs no
    SQS request). Either way no other Lambda sits between a timer firing and the invoker.
    """

    def __init__(self, scope: Construct, id: str, *, target: sqs.IQueue) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        # Named after the stack so two stacks in one account keep their schedules apart,
        # and so the schedule ARNs in the functions' policies are known at synth time.
        self.group_name = f"{stack.stack_name}-timers"
        self.group = scheduler.CfnScheduleGroup(self, "Group", name=self.group_name)
        self.schedules_arn = stack.format_arn(
            service="scheduler", resource="schedule", resource_name=f"{self.group_name}/*"
        )
        self.role = iam.Role(
            self,
            "Role",
            description="EventBridge Scheduler: deliver EZGH timers to the invoker or its queue",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                # Confused-deputy guard: only schedules in this account may use the role.
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            ),
        )
        # Not queue.grant_send_messages: that adds GetQueueAttributes and GetQueueUrl too.
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[target.queue_arn])
        )

    def add_recurring(self, spec: Recurring, target_arn: str) -> scheduler.CfnSchedule:
        """The stack's own recurring schedule `spec` (topology `Recurring`), in the timers'
        group, firing `target_arn` (the function, invoked asynchronously by the role)."""
        return scheduler.CfnSchedule(
            self,
            f"Recurring{spec.name.title().replace('-', '')}",
            name=spec.name,
            group_name=self.group_name,
            schedule_expression=spec.expression,
            schedule_expression_timezone="UTC",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn=target_arn,
                role_arn=self.role.role_arn,
                input=spec.message,
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_event_age_in_seconds=SCHEDULER_RETRY["MaximumEventAgeInSeconds"],
                    maximum_retry_attempts=SCHEDULER_RETRY["MaximumRetryAttempts"],
                ),
            ),
        )

    def grant_manage_schedules(self, grantee: iam.IGrantable) -> None:
        """Let `grantee` create and delete schedules in this group, handing them the role."""
        iam.Grant.add_to_principal(
            grantee=grantee,
            # Update: cron schedules are paused, resumed and changed in place.
            actions=[
                "scheduler:CreateSchedule",
                "scheduler:DeleteSchedule",
                "scheduler:UpdateSchedule",
            ],
            resource_arns=[self.schedules_arn],
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["iam:PassRole"],
            resource_arns=[self.role.role_arn],
            # The role may be handed to Scheduler only, not to any other service.
            conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
        )
