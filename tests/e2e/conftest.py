"""One local runtime (moto server, pollers, API, the test app) per session, reset per test."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
from ezgh_engine import config
from ezgh_engine.clock import SkipClock
from ezgh_engine.local import call_log
from ezgh_engine.local.emulator import ENV_DYNAMODB_URL
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import WorkflowsClient

from tests.ddblocal import BACKENDS
from tests.e2e import workflows_app


# Package scope: moto keeps its state in process globals, so this runtime must be gone
# before another suite (tests/local) starts an emulator of its own. Every test runs on
# moto's DynamoDB and (marker `ddblocal`) on AWS's DynamoDB Local, SQS, S3 and Scheduler
# staying on moto.
@pytest.fixture(scope="package", params=BACKENDS)
def runtime(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRuntime]:
    saved = os.environ.pop(ENV_DYNAMODB_URL, None)
    if request.param == "ddblocal":
        os.environ[ENV_DYNAMODB_URL] = request.getfixturevalue("dynamodb_local").url
    # Record every function's AWS requests for tests/infra/test_iam_calls.py (tests/conftest.py).
    recording = os.environ.get("EZGH_E2E_CALL_LOG") and not os.environ.get(call_log.ENV_CALL_LOG)
    if recording:
        os.environ[call_log.ENV_CALL_LOG] = os.environ["EZGH_E2E_CALL_LOG"]
    rt = LocalRuntime(
        port=0,
        state_dir=tmp_path_factory.mktemp("ezgh"),
        apps=[("e2e", workflows_app.served)],
        clock=SkipClock(),
    )
    try:
        rt.start()
        yield rt
    finally:
        rt.stop()
        os.environ.pop(ENV_DYNAMODB_URL, None)
        if saved is not None:
            os.environ[ENV_DYNAMODB_URL] = saved
        if recording:
            os.environ.pop(call_log.ENV_CALL_LOG, None)


@pytest.fixture()
def engine(runtime: LocalRuntime) -> Iterator[LocalRuntime]:
    runtime.reset()
    workflows_app.reset()
    yield runtime
    # Let the handlers the test left running finish before the next test resets the state
    # under them; runs left sleeping, waiting or held back are dropped with the state.
    workflows_app.served.failures_left = 0
    for event in workflows_app.GATES.values():
        event.set()
    with contextlib.suppress(TimeoutError):
        runtime.wait_for(lambda: runtime.activity.snapshot()[0] == 0, timeout=15)
    for name in (config.ENV_INVOKE_ATTEMPTS, config.ENV_SQS_MAX_DELAY):
        os.environ.pop(name, None)
    config.reset_settings()


@pytest.fixture()
def client(engine: LocalRuntime) -> WorkflowsClient:
    return WorkflowsClient(
        api_key=engine.api_key,
        organization_id=engine.org_id,
        project_id=engine.project_id,
        base_url=engine.api_url,
    )


@pytest.fixture()
def app_id(engine: LocalRuntime) -> str:
    return str(engine.apps["e2e"].record["id"])
