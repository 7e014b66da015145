"""Fixtures shared by every suite: AWS's DynamoDB Local, started once per session on demand.

Suites that touch DynamoDB run on moto and, under the `ddblocal` marker, on DynamoDB Local
as well (`-m ddblocal` for only those, `-m "not ddblocal"` to skip them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ddblocal import DynamoDBLocal


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
