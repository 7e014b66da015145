from __future__ import annotations

import pytest
from sdk_fakes import FakeEngine


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


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
