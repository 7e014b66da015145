"""Lambda handler for the `notifications` queue: run-ended messages to the apps' queues."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from ezgh_engine.service.notifications import lambda_handler

logger = Logger(service="ezgh-notify")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return lambda_handler(event, context)
