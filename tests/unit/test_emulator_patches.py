"""The emulator's patches of moto's internals fail loudly when those internals are gone:
`ezgh dev` must not run on without its DynamoDB lock or stream wakeups."""

from __future__ import annotations

import sys
from importlib.metadata import version

import pytest
from ezgh_engine.local import emulator
from packaging.requirements import Requirement
from packaging.version import Version


@pytest.mark.parametrize(
    ("module", "patch", "flag"),
    [
        ("moto.dynamodb.responses", emulator.serialize_dynamodb, "_dynamodb_serialized"),
        ("moto.dynamodb.models", emulator.lighten_dynamodb, "_dynamodb_lightened"),
    ],
)
def test_a_missing_moto_internal_is_an_error(
    monkeypatch: pytest.MonkeyPatch, module: str, patch: object, flag: str
) -> None:
    monkeypatch.setattr(emulator, flag, False)
    monkeypatch.setitem(sys.modules, module, None)  # importing it raises ImportError
    with pytest.raises(emulator.MotoInternalsMissing, match=r"pinned in pyproject\.toml"):
        patch()  # type: ignore[operator]


def test_the_stream_wakeup_fails_loudly_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "moto.dynamodb.models.table", None)
    with pytest.raises(emulator.MotoInternalsMissing):
        emulator._StreamWakeup().install()


def test_the_installed_moto_is_in_the_pinned_range() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    moto = next(Requirement(r) for r in project["project"]["dependencies"] if "moto" in r)
    assert moto.specifier.contains(Version(version("moto")))
    assert any(s.operator == "<" for s in moto.specifier), "moto needs an upper bound"
