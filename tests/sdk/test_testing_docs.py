"""docs/testing.md's examples are tests: its Python blocks run in order as one module, and
each `test_*` function they define runs here (with the `workflow_env` fixture if it asks)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from ezgh_workflows.testing import WorkflowEnvironment

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _examples() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "testing_docs"}
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, "docs/testing.md has no Python blocks"
    for index, block in enumerate(blocks):
        exec(compile(block, f"{DOC}[block {index + 1}]", "exec"), namespace)
    return namespace


EXAMPLES = _examples()
TESTS = sorted(name for name in EXAMPLES if name.startswith("test_"))


def test_the_guide_has_its_examples() -> None:
    assert len(TESTS) >= 15


@pytest.mark.parametrize("name", TESTS)
def test_example(name: str, workflow_env: WorkflowEnvironment) -> None:
    example = EXAMPLES[name]
    wanted = inspect.signature(example).parameters
    example(**({"workflow_env": workflow_env} if "workflow_env" in wanted else {}))
