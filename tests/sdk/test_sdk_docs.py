"""docs/sdk.md's examples are tests: its Python blocks run in order as one module, and each
`test_*` function they define runs here, with the fixtures it names: `workflow_env` (the
test kit) and `dev` (a local engine serving the page's `app` as "docs", whose settings are
in the environment as `set -a; . .ezgh/dev.env; set +a` puts them)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows.testing import WorkflowEnvironment

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"


def _examples() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "sdk_docs"}
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, "docs/sdk.md has no Python blocks"
    for index, block in enumerate(blocks):
        exec(compile(block, f"{DOC}[block {index + 1}]", "exec"), namespace)
    return namespace


EXAMPLES = _examples()
TESTS = sorted(name for name in EXAMPLES if name.startswith("test_"))


@pytest.fixture(scope="module")
def dev_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    runtime = LocalRuntime(
        port=0, state_dir=tmp_path_factory.mktemp("ezgh"), apps=[("docs", EXAMPLES["app"])]
    )
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture()
def dev(dev_runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch) -> LocalRuntime:
    for name, value in dev_runtime.env.items():  # what dev.env holds
        monkeypatch.setenv(name, value)
    return dev_runtime


def test_the_page_has_an_example_of_every_public_name() -> None:
    import ezgh_workflows

    text = DOC.read_text()
    missing = [name for name in ezgh_workflows.__all__ if f"`{name}" not in text]
    assert not missing, f"docs/sdk.md does not document {missing}"
    assert len(TESTS) >= 10


@pytest.mark.parametrize("name", TESTS)
def test_example(name: str, request: pytest.FixtureRequest) -> None:
    example = EXAMPLES[name]
    wanted = inspect.signature(example).parameters
    fixtures = {p: request.getfixturevalue(p) for p in wanted}
    if "workflow_env" in fixtures:
        assert isinstance(fixtures["workflow_env"], WorkflowEnvironment)
    example(**fixtures)
