from __future__ import annotations

from collections.abc import Iterator

import pytest

# The test kit's fixture, also where the SDK was installed before it declared its plugin.
from ezgh_workflows.pytest_plugin import workflow_env as workflow_env
from sdk_engine import Engine, Plant, engine_of, plant

from tests.ddblocal import BACKENDS


@pytest.fixture(scope="module", params=BACKENDS)
def engine_plant(request: pytest.FixtureRequest) -> Iterator[Plant]:
    """The real engine on in-process moto, once per module and backend (each test has its
    own runs); under the `ddblocal` param its tables are in AWS's DynamoDB Local."""
    server = request.getfixturevalue("dynamodb_local") if request.param == "ddblocal" else None
    with plant(server) as made:
        yield made


@pytest.fixture
def engine(engine_plant: Plant) -> Iterator[Engine]:
    with engine_of(engine_plant) as made:
        yield made


@pytest.fixture(autouse=True)
def _no_deployment_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "EZGH_DEPLOYMENT_ID",
        "EZGH_SIGNING_KEY",
        "VERCEL_DEPLOYMENT_ID",
        "AWS_LAMBDA_FUNCTION_NAME",
        "K_SERVICE",
        "FLY_APP_NAME",
        "RENDER_SERVICE_ID",
        "RENDER_DEPLOY_ID",
    ):
        monkeypatch.delenv(name, raising=False)
