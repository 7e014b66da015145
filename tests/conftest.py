"""Session-wide wiring shared by every suite.

- AWS's DynamoDB Local, started once per session on demand: suites that touch DynamoDB run on
  moto and, under the `ddblocal` marker, on DynamoDB Local as well (`-m ddblocal` for only
  those, `-m "not ddblocal"` to skip them).
- One run of tests/e2e also records each function's AWS requests: tests/infra/test_iam_calls.py
  checks them against the synthesized IAM policies. In a session that runs the whole of
  tests/e2e (the README's test command) the e2e runtime records into `EZGH_E2E_CALL_LOG`, and
  the IAM test reads that recording instead of running the e2e suite again in a child process.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from tests.ddblocal import DynamoDBLocal

E2E_CALL_LOG = "EZGH_E2E_CALL_LOG"


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(E2E_CALL_LOG):
        os.environ[E2E_CALL_LOG] = tempfile.mkdtemp(prefix="ezgh-e2e-calls-")


def ran_all_of_e2e(session: pytest.Session) -> bool:
    """Whether this session collected the e2e suite unfiltered (its recording is complete)."""
    option = session.config.option
    if getattr(option, "keyword", "") or getattr(option, "markexpr", ""):
        return False
    if getattr(option, "lf", False) or getattr(option, "deselect", None):
        return False
    return any(item.nodeid.startswith("tests/e2e/") for item in session.items)


@pytest.fixture(scope="session")
def dynamodb_local() -> Iterator[DynamoDBLocal]:
    """One in-memory DynamoDB Local for the session (killed at its end)."""
    server = DynamoDBLocal()
    try:
        server.start()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()
