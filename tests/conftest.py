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
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ddblocal import DynamoDBLocal

E2E_CALL_LOG = "EZGH_E2E_CALL_LOG"

# Which modules also run on DynamoDB Local by default: those whose assertions are about what
# DynamoDB stores and refuses (conditional writes, transactions, expressions, streams, TTL
# items, keys and cursors). The rest (authorization matrix, fuzzing, signatures, the CLI's
# printing) exercise the same store calls on moto and would only double the suite's time.
# tests/e2e/test_queues.py stays on moto: its notification and dead-letter tests wait on SQS
# timings that DynamoDB Local's slower stream polling made miss (tests/api/test_queues.py
# covers the queue store on both). `EZGH_DDBLOCAL=all` runs every module on both backends.
DDBLOCAL_MODULES = frozenset(
    {
        "tests/api/test_apps.py",
        "tests/api/test_auth_keys.py",
        "tests/api/test_bad_input.py",
        "tests/api/test_branch_outcomes.py",
        "tests/api/test_ops_stuck_runs.py",
        "tests/api/test_protocol_races.py",
        "tests/api/test_pull_access.py",
        "tests/api/test_queues.py",
        "tests/api/test_races.py",
        "tests/api/test_repair.py",
        "tests/api/test_requests.py",
        "tests/api/test_retention.py",
        "tests/api/test_run_scopes.py",
        "tests/api/test_run_start_writes.py",
        "tests/api/test_runs_routes.py",
        "tests/api/test_schedules_api.py",
        "tests/api/test_send_idempotency.py",
        "tests/api/test_step_writes.py",
        "tests/api/test_steps_function.py",
        "tests/api/test_token_lifetime.py",
        "tests/e2e/test_control.py",
        "tests/e2e/test_durable_runs.py",
        "tests/e2e/test_flows.py",
        "tests/e2e/test_pull.py",
        "tests/e2e/test_schedules.py",
        "tests/e2e/test_waits.py",
    }
)


def _share_botocore_models() -> None:
    """One botocore data loader for every session the test process makes.

    The engine makes each boto3 client from a new `Session` (`adapters.aws.client`) and every
    test forgets them (`reset_clients`), so each test had a new loader re-parse
    `endpoints.json` and the service models and list the data directories again: about half
    of tests/api's time. A `Loader` only reads and caches what it loads (the `sdk-extras`
    merge is the same merge each time), so one per search path serves every session.
    """
    from botocore import loaders, session

    if getattr(session.create_loader, "_ezgh_shared", False):
        return
    create = loaders.create_loader
    made: dict[str | None, loaders.Loader] = {}
    lock = threading.Lock()

    class Paths(list[Any]):
        """Search paths that keep one copy of each: every boto3 Session appends its own."""

        def append(self, path: Any) -> None:
            if path not in self:
                super().append(path)

    def create_loader(search_path_string: str | None = None) -> loaders.Loader:
        with lock:
            if search_path_string not in made:
                loader = create(search_path_string)
                loader._search_paths = Paths(loader.search_paths)
                made[search_path_string] = loader
            return made[search_path_string]

    create_loader._ezgh_shared = True  # type: ignore[attr-defined]
    session.create_loader = create_loader


_share_botocore_models()


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(E2E_CALL_LOG):
        os.environ[E2E_CALL_LOG] = tempfile.mkdtemp(prefix="ezgh-e2e-calls-")


# Under pytest-xdist (`--dist loadgroup`, as scripts/test.sh runs the suite) each of these
# packages runs whole on one worker: one local runtime per backend for the package (its
# parametrized package fixture would otherwise be set up again for every file), and moto's
# process-global state used by one package at a time. Every other module is one group, so a
# module-scoped fixture (an emulator, a synth) is made once.
WHOLE_PACKAGES = ("tests/e2e/", "tests/faults/", "tests/console/")


def _xdist_group(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    for package in WHOLE_PACKAGES:
        if module.startswith(package):
            return package.rstrip("/")
    return module


@pytest.hookimpl(tryfirst=True)  # before xdist reads the `xdist_group` marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the DynamoDB Local variants of `DDBLOCAL_MODULES` only (unless EZGH_DDBLOCAL=all),
    and group the items for pytest-xdist (see `WHOLE_PACKAGES`)."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_xdist_group(item.nodeid)))
    if os.environ.get("EZGH_DDBLOCAL") == "all":
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        on_ddblocal = item.get_closest_marker("ddblocal") is not None
        (dropped if on_ddblocal and module not in DDBLOCAL_MODULES else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


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
