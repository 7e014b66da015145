"""boto3 clients, made once per process and per thread-safe service.

Endpoints come from the standard `AWS_ENDPOINT_URL` variables, so the same code talks to AWS
in Lambda and to moto's server under `ezgh dev` and the tests.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import boto3
from botocore.config import Config

_CONFIG = Config(
    retries={"max_attempts": 5, "mode": "adaptive"},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=50,
    account_id_endpoint_mode="disabled",
)
_lock = threading.Lock()


@cache
def client(service: str) -> Any:
    """A shared boto3 client (boto3 clients are thread-safe; sessions are not)."""
    with _lock:
        return boto3.session.Session().client(service, config=_CONFIG)


def reset_clients() -> None:
    """Forget cached clients (after the endpoint or credentials change)."""
    client.cache_clear()
