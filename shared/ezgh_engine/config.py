"""Settings every handler reads from its environment, validated once at cold start."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property, lru_cache

from ezgh_engine import stack_name
from ezgh_engine.topology import (
    FLOWS_FUNCTION,
    INVOCATIONS_QUEUE,
    INVOKER_FUNCTION,
    REGISTRY_TABLE,
    RUNS_TABLE,
    STEPS_FUNCTION,
    TOPOLOGY,
)

# Environment variable names that are not a topology resource.
ENV_API_URL = "EZGH_ENGINE_API_URL"  # public base URL of the engine's API (callbacks, SDK calls)
ENV_TOKEN_SECRET = "EZGH_TOKEN_SECRET"  # HMAC secret for invocation tokens (ezgh dev, tests)
ENV_TOKEN_SECRET_ARN = "EZGH_TOKEN_SECRET_ARN"  # deployed: the Secrets Manager secret holding it
ENV_ALLOW_LOOPBACK = "EZGH_ALLOW_LOOPBACK_APPS"  # "1" only in `ezgh dev`
ENV_SQS_MAX_DELAY = "EZGH_SQS_MAX_DELAY_SECONDS"  # longer waits go through Scheduler
ENV_PAYLOAD_THRESHOLD = "EZGH_PAYLOAD_INLINE_BYTES"
ENV_INVOKE_TIMEOUT = "EZGH_INVOKE_TIMEOUT_SECONDS"
ENV_INVOKE_ATTEMPTS = "EZGH_INVOKE_MAX_ATTEMPTS"
ENV_INVOCATIONS_QUEUE_ARN = "EZGH_INVOCATIONS_QUEUE_ARN"  # Scheduler targets it directly
# Requests a second one API key may make, all environments together (0: no limit).
ENV_LEGACY_RUNS_INDEX = "EZGH_LEGACY_RUNS_INDEX"
ENV_KEY_RATE_LIMIT = "EZGH_KEY_RATE_LIMIT"
DEFAULT_KEY_RATE_LIMIT = 100
# The prefix of what the engine names at run time (`stack_name`, re-exported here).
ENV_STACK_PREFIX = stack_name.ENV_STACK_PREFIX
DEFAULT_STACK_PREFIX = stack_name.DEFAULT_STACK_PREFIX
stack_prefix = stack_name.stack_prefix


_INVOKER_ARN_ENV = INVOKER_FUNCTION.async_invoke.env_var if INVOKER_FUNCTION.async_invoke else ""


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
    # Where SDKs send step calls (the steps function's URL); the API's URL when not set.
    steps_url: str = ""
    # The EzFlow interpreter function's URL: where the invoker calls the engine's own app.
    flows_url: str = ""
    allow_loopback_apps: bool = False
    # SQS can delay a message at most 15 minutes; longer waits use EventBridge Scheduler.
    sqs_max_delay_seconds: int = 900
    # Values larger than this are stored in S3 and the item keeps a reference.
    payload_inline_bytes: int = 64 * 1024
    invoke_timeout_seconds: float = 300.0
    invoke_max_attempts: int = 8
    token_secret_env: str = ""
    token_secret_arn: str = ""
    # The invoker function's ARN where this function may invoke it asynchronously (starts
    # without paying for an SQS message, Scheduler targeting it); "" sends to the queue instead.
    invoker_function_arn: str = ""
    # Per-key rate limit of the API (service/rate_limits.py): requests a second, 0 for none.
    key_rate_limit: int = DEFAULT_KEY_RATE_LIMIT
    # A stack part-way through creating the narrow runs indexes (one per deploy): new runs
    # are also written to, and runs are listed from, the whole-item index `gsi1` as before.
    legacy_runs_index: bool = False

    @cached_property
    def token_secret(self) -> str:
        """The invocation-token HMAC secret: from the environment locally, from Secrets
        Manager when deployed, read once per container and only by the functions that need
        it (the stream function has no permission to read it, by design)."""
        if self.token_secret_env:
            return self.token_secret_env
        if not self.token_secret_arn:
            raise RuntimeError(f"set {ENV_TOKEN_SECRET} or {ENV_TOKEN_SECRET_ARN}")
        from ezgh_engine.adapters.aws import client  # late: adapters import this module

        answer = client("secretsmanager").get_secret_value(SecretId=self.token_secret_arn)
        return str(answer["SecretString"])


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
        steps_url=(
            os.environ.get(str(STEPS_FUNCTION.url_env_var)) or _required(ENV_API_URL)
        ).rstrip("/"),
        flows_url=os.environ.get(str(FLOWS_FUNCTION.url_env_var), "").rstrip("/"),
        allow_loopback_apps=os.environ.get(ENV_ALLOW_LOOPBACK) == "1",
        sqs_max_delay_seconds=int(os.environ.get(ENV_SQS_MAX_DELAY, "900")),
        payload_inline_bytes=int(os.environ.get(ENV_PAYLOAD_THRESHOLD, str(64 * 1024))),
        invoke_timeout_seconds=float(os.environ.get(ENV_INVOKE_TIMEOUT, "300")),
        invoke_max_attempts=int(os.environ.get(ENV_INVOKE_ATTEMPTS, "8")),
        token_secret_env=os.environ.get(ENV_TOKEN_SECRET, ""),
        token_secret_arn=os.environ.get(ENV_TOKEN_SECRET_ARN, ""),
        invoker_function_arn=os.environ.get(_INVOKER_ARN_ENV, ""),
        key_rate_limit=int(os.environ.get(ENV_KEY_RATE_LIMIT, str(DEFAULT_KEY_RATE_LIMIT))),
        legacy_runs_index=os.environ.get(ENV_LEGACY_RUNS_INDEX) == "1",
    )


def reset_settings() -> None:
    settings.cache_clear()
