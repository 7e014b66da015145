"""Handlers for tests/local/test_environments.py, run in execution environments (child
processes): they leave a file per attempt, named by the SQS receive count and their pid."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def api(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Health at once; `/slow` sleeps past any timeout; anything else: who answered."""
    path = event["rawPath"]
    if path == "/slow":
        time.sleep(60)
    body = {"status": "ok"} if path == "/v1/health" else {"pid": os.getpid()}
    return {
        "statusCode": 200,
        "headers": {"content-type": "application/json"},
        "body": json.dumps(body),
    }


def worker(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Each record: `{"dir", "hang": attempts that hang}`; a file marks start and end."""
    for record in event["Records"]:
        order = json.loads(record["body"])
        if "dir" not in order:  # the wake-up message a reset sends
            continue
        attempt = int(record["attributes"]["ApproximateReceiveCount"])
        stem = Path(order["dir"]) / f"{attempt}-{os.getpid()}"
        stem.with_suffix(".start").write_text(str(context.get_remaining_time_in_millis()))
        if order.get("aws"):
            from ezgh_engine.adapters import aws

            aws.client("sqs").list_queues()
        if attempt <= order["hang"]:
            time.sleep(60)
        stem.with_suffix(".done").write_text("")
    return {"batchItemFailures": []}
