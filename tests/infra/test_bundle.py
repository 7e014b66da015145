"""The Lambda bundle imports on its own: built by infra/bundle.py for this machine and imported
in an interpreter that sees only the bundle (and the standard library).

The dev virtualenv has every package installed, so importing the handlers there proves
nothing about the bundle; this is the test that fails when the bundle misses a requirement
(it once shipped without `cryptography`, so every API request and step call would have failed
on Lambda with ModuleNotFoundError).

The bundle is built with the same code path as the deployed one (`bundle.build`), for the
host target: the same requirement closure, with the installed distributions copied instead of
wheels fetched for Lambda's platform, so the test runs offline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("packaging")

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `infra` is not an installed package
    sys.path.insert(0, str(ROOT))

from ezgh_engine.topology import TOPOLOGY  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

from infra import bundle  # noqa: E402

# Modules no handler reaches: the local runtime (moto, Flask), the CLI's `ezgh dev`, and
# `__main__` modules (they run a program when imported).
NOT_IN_LAMBDA = ("ezgh_engine.local", "ezgh_engine.cli.dev")

# Run with `python -I -S`: no site-packages, no PYTHON* variables, no current directory.
_PROBE = r"""
import importlib, json, pkgutil, sys
bundle, skip, handlers = sys.argv[1], tuple(json.loads(sys.argv[2])), json.loads(sys.argv[3])
sys.path.insert(0, bundle)
import ezgh_engine, functions
names = [
    m.name
    for package in (ezgh_engine, functions)
    for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
]
report = {"imported": [], "failed": {}, "handlers": {}, "paths": {}}
for name in names:
    if name.startswith(skip) or name.rsplit(".", 1)[-1] == "__main__":
        continue
    try:
        importlib.import_module(name)
        report["imported"].append(name)
    except BaseException as exc:
        report["failed"][name] = f"{type(exc).__name__}: {exc}"
for dotted in handlers:
    module, _, attr = dotted.partition(":")
    try:
        report["handlers"][dotted] = callable(getattr(importlib.import_module(module), attr))
    except BaseException as exc:
        report["handlers"][dotted] = f"{type(exc).__name__}: {exc}"
# Where every third-party module came from: the bundle or the standard library, nothing else.
for name, mod in list(sys.modules.items()):
    path = getattr(mod, "__file__", None)
    if path and "." not in name:
        report["paths"][name] = path
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def host_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bundle.build(tmp_path_factory.mktemp("bundle") / "asset", target=bundle.HOST)


def probe(asset: Path, cwd: Path) -> dict[str, Any]:
    handlers = [f.handler for f in TOPOLOGY.functions]
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, str(asset), json.dumps(NOT_IN_LAMBDA),
         json.dumps(handlers)],
        capture_output=True, text=True, cwd=cwd, timeout=120, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_every_handler_and_engine_module_imports_from_the_bundle_alone(
    host_bundle: Path, tmp_path: Path
) -> None:
    report = probe(host_bundle, tmp_path)
    assert report["failed"] == {}, report["failed"]
    assert report["handlers"] == {f.handler: True for f in TOPOLOGY.functions}
    # Not vacuous: the walk found the whole engine (the modules function-local imports name).
    imported = set(report["imported"])
    assert {"ezgh_engine.api.idempotency", "ezgh_engine.adapters.aws"} <= imported
    assert len(imported) > 50, sorted(imported)
    stdlib = Path(sys.base_prefix).resolve()
    for name, path in report["paths"].items():
        where = Path(path).resolve()
        assert where.is_relative_to(host_bundle.resolve()) or where.is_relative_to(stdlib), (
            f"{name} was imported from {where}, outside the bundle"
        )


def test_the_probe_fails_when_the_bundle_misses_a_requirement(
    host_bundle: Path, tmp_path: Path
) -> None:
    """The check above can fail: a bundle without `cryptography` does not import."""
    broken = tmp_path / "broken"
    bundle._link_tree(host_bundle, broken)
    for path in broken.glob("cryptography*"):
        bundle.shutil.rmtree(path)
    report = probe(broken, tmp_path)
    assert "ezgh_engine.api.idempotency" in report["failed"]
    assert "No module named 'cryptography'" in report["failed"]["ezgh_engine.api.idempotency"]


def test_requirements_come_from_pyproject_only() -> None:
    """One list: the bundle ships `[project] dependencies` minus the declared exclusions."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    excluded = {canonicalize_name(n) for n in data["tool"]["ezgh"]["bundle"]["exclude"]}
    declared = {canonicalize_name(r.name) for r in bundle.declared_requirements()}
    every = {canonicalize_name(bundle.Requirement(r).name) for r in data["project"]["dependencies"]}
    assert declared == every - excluded
    assert {"moto", "flask", "flask-cors", "ezgh-workflows"} <= excluded
    assert not hasattr(bundle, "REQUIREMENTS")  # no second list
    pinned = {p.split("==")[0] for p in bundle.pinned_requirements()}
    assert declared <= pinned and "cryptography" in pinned
    assert not ({"moto", "flask", "werkzeug", "ezgh-workflows"} & pinned)


def test_a_stale_exclusion_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\ndependencies = ["boto3"]\n[tool.ezgh.bundle]\nexclude = ["moto"]\n'
    )
    with pytest.raises(ValueError, match="moto"):
        bundle.declared_requirements(pyproject)


def test_lambda_requirements_are_evaluated_for_lambdas_platform() -> None:
    """Markers are read for CPython 3.12 on Linux arm64, not for the machine building."""
    assert bundle.LAMBDA.markers["python_version"] == "3.12"
    assert bundle.LAMBDA.markers["platform_machine"] == "aarch64"
    lambda_pins = bundle.pinned_requirements(bundle.LAMBDA)
    assert all("==" in p for p in lambda_pins)
