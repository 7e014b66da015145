"""The pytest fixture of `ezgh_workflows.testing`, loaded by pytest when the SDK is
installed (the ``pytest11`` entry point): ``def test_x(workflow_env): ...``.

Elsewhere (the SDK on ``sys.path`` without being installed), name it in a ``conftest.py``:
``pytest_plugins = ["ezgh_workflows.pytest_plugin"]``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .testing import WorkflowEnvironment


@pytest.fixture
def workflow_env() -> Iterator[WorkflowEnvironment]:
    """A `WorkflowEnvironment` with no workflows yet (``workflow_env.register(...)``, or
    ``workflow_env.start(my_workflow, ...)``), closed after the test."""
    with WorkflowEnvironment() as env:
        yield env
