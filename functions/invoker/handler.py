"""Lambda handler for the invocations queue: one message, one invocation or timer."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from ezgh_engine.service.invoker import handle_batch

logger = Logger(service="ezgh-invoker")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    failed = handle_batch(event.get("Records", []))
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}
