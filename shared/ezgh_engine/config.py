"""Settings every handler reads from its environment, validated once at cold start."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from ezgh_engine.topology import INVOCATIONS_QUEUE, REGISTRY_TABLE, RUNS_TABLE, TOPOLOGY

# Environment variable names that are not a topology resource.
ENV_API_URL = "EZGH_ENGINE_API_URL"  # public base URL of the engine's API (callbacks, SDK calls)
ENV_TOKEN_SECRET = "EZGH_TOKEN_SECRET"  # HMAC secret for invocation tokens
ENV_ALLOW_LOOPBACK = "EZGH_ALLOW_LOOPBACK_APPS"  # "1" only in `ezgh dev`
ENV_SQS_MAX_DELAY = "EZGH_SQS_MAX_DELAY_SECONDS"  # longer waits go through Scheduler
ENV_PAYLOAD_THRESHOLD = "EZGH_PAYLOAD_INLINE_BYTES"
ENV_INVOKE_TIMEOUT = "EZGH_INVOKE_TIMEOUT_SECONDS"
ENV_INVOKE_ATTEMPTS = "EZGH_INVOKE_MAX_ATTEMPTS"
ENV_INVOCATIONS_QUEUE_ARN = "EZGH_INVOCATIONS_QUEUE_ARN"  # Scheduler targets it directly


@dataclass(frozen=True)
class Settings:
    runs_table: str
    registry_table: str
    invocations_queue_url: str
    invocations_queue_arn: str
    payload_bucket: str
    scheduler_group: str
    scheduler_role_arn: str
    api_url: str
    token_secret: str
    allow_loopback_apps: bool = False
    # SQS can delay a message at most 15 minutes; longer waits use EventBridge Scheduler.
    sqs_max_delay_seconds: int = 900
    # Values larger than this are stored in S3 and the item keeps a reference.
    payload_inline_bytes: int = 64 * 1024
    invoke_timeout_seconds: float = 300.0
    invoke_max_attempts: int = 8


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"environment variable {name} is not set")
    return value


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process's settings (cached; `reset_settings()` after changing the environment)."""
    return Settings(
        runs_table=_required(RUNS_TABLE.env_var),
        registry_table=_required(REGISTRY_TABLE.env_var),
        invocations_queue_url=_required(INVOCATIONS_QUEUE.env_var),
        invocations_queue_arn=os.environ.get(ENV_INVOCATIONS_QUEUE_ARN, ""),
        payload_bucket=_required(TOPOLOGY.bucket_env_var),
        scheduler_group=os.environ.get(TOPOLOGY.scheduler_group_env_var, "default"),
        scheduler_role_arn=os.environ.get(TOPOLOGY.scheduler_role_env_var, ""),
        api_url=_required(ENV_API_URL).rstrip("/"),
        token_secret=_required(ENV_TOKEN_SECRET),
        allow_loopback_apps=os.environ.get(ENV_ALLOW_LOOPBACK) == "1",
        sqs_max_delay_seconds=int(os.environ.get(ENV_SQS_MAX_DELAY, "900")),
        payload_inline_bytes=int(os.environ.get(ENV_PAYLOAD_THRESHOLD, str(64 * 1024))),
        invoke_timeout_seconds=float(os.environ.get(ENV_INVOKE_TIMEOUT, "300")),
        invoke_max_attempts=int(os.environ.get(ENV_INVOKE_ATTEMPTS, "8")),
    )


def reset_settings() -> None:
    settings.cache_clear()
