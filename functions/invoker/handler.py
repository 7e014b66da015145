"""Lambda handler for the invocations queue: each message to its handler, partial batch answer."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from ezgh_engine.service.invocation_queue import lambda_handler

logger = Logger(service="ezgh-invoker")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return lambda_handler(event, context)
