"""Build the Lambda code asset locally, without Docker.

    python -m infra.bundle            # build/lambda: engine + handlers + aarch64 wheels
    python -m infra.bundle --no-deps  # engine + handlers only (offline; not deployable)

One folder serves every function (they differ only in handler). What it ships is declared
once, in pyproject.toml: the `[project] dependencies` minus `[tool.ezgh.bundle] exclude` (the
local runtime's and the SDK's packages), with everything they require in turn. Each package
is pinned to the version installed in the running environment, so Lambda runs the versions
the tests ran.

Two targets share that computation and differ only in where the packages come from:

- `LAMBDA` (deploys): wheels for Lambda's platform (CPython 3.12 on arm64) fetched by pip with
  `--platform`, so the build works on any machine; cached under build/lambda-deps/<hash> and
  reused until the pins change.
- `HOST` (tests/infra/test_bundle.py): the installed distributions themselves, copied from the
  running environment by their RECORD file lists (offline), so a test can import the bundle
  in an interpreter that sees nothing else and fail when a requirement is missing.

boto3 and botocore are bundled although the runtime has them: the runtime's copy changes
under us (and may lag), while the engine relies on a recent botocore (`account_id_endpoint_mode`
in adapters/aws.py, Scheduler's `ActionAfterCompletion`). Pinning costs ~20 MB of zip and
nothing at run time (the import happens either way).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "lambda"
DEPS_CACHE = ROOT / "build" / "lambda-deps"
PYPROJECT = ROOT / "pyproject.toml"
# First-party packages, shipped from source: the engine, the handlers, and the SDK (not on
# PyPI; EzFlow's interpreter, `ezgh_engine.interpreter`, is a workflow written with it).
SOURCES = {
    "ezgh_engine": ROOT / "shared" / "ezgh_engine",
    "functions": ROOT / "functions",
    "ezgh_workflows": ROOT / "sdk" / "ezgh_workflows",
}
STAMP = ".ezgh-bundle.json"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache")


def _environment() -> dict[str, str]:
    """The running interpreter's marker values (packaging types them loosely)."""
    return {k: str(v) for k, v in default_environment().items()}


@dataclass(frozen=True)
class Target:
    """Where the bundle runs: the markers its requirements are evaluated with, and for
    Lambda the pip platform tags its wheels are fetched for (none: copy the installed ones)."""

    name: str
    python_version: str
    markers: dict[str, str]
    pip_platforms: tuple[str, ...] = ()


# Lambda's python3.12 runs on Amazon Linux 2023 (glibc 2.34): both tags load there.
LAMBDA = Target(
    name="lambda",
    python_version="3.12",
    markers={
        **_environment(),
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": "3.12",
        "python_full_version": "3.12.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "aarch64",
        "os_name": "posix",
    },
    pip_platforms=("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
)
HOST = Target(
    name="host",
    python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
    markers=_environment(),
)
PLATFORMS = LAMBDA.pip_platforms  # what the functions' architecture must match
PYTHON_VERSION = LAMBDA.python_version


def declared_requirements(pyproject: Path = PYPROJECT) -> list[Requirement]:
    """The `[project] dependencies` the bundle ships (all but `[tool.ezgh.bundle] exclude`)."""
    data = tomllib.loads(pyproject.read_text())
    excluded = {canonicalize_name(n) for n in data["tool"]["ezgh"]["bundle"]["exclude"]}
    requirements = [Requirement(r) for r in data["project"]["dependencies"]]
    unknown = excluded - {canonicalize_name(r.name) for r in requirements}
    if unknown:  # a stale exclusion would hide a later, real dependency of that name
        raise ValueError(f"[tool.ezgh.bundle] exclude names no dependency: {sorted(unknown)}")
    return [r for r in requirements if canonicalize_name(r.name) not in excluded]


def closure(requirements: list[Requirement], target: Target) -> list[metadata.Distribution]:
    """The installed distributions of `requirements` and of all they require on `target`
    (markers evaluated for it, extras followed), sorted by name."""
    found: dict[str, metadata.Distribution] = {}
    pending = [(r, frozenset(r.extras)) for r in requirements]
    extras_seen: dict[str, frozenset[str]] = {}
    while pending:
        requirement, extras = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in found and extras <= extras_seen[name]:
            continue
        try:
            dist = found.get(name) or metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise RuntimeError(
                f"{requirement.name} is required by the bundle but not installed: "
                "run scripts/setup.sh"
            ) from None
        found[name] = dist
        extras_seen[name] = extras_seen.get(name, frozenset()) | extras
        for line in dist.requires or []:
            child = Requirement(line)
            wanted = ["", *sorted(extras_seen[name])]
            if child.marker is None or any(
                child.marker.evaluate({**target.markers, "extra": e}) for e in wanted
            ):
                pending.append((child, frozenset(child.extras)))
    return [found[n] for n in sorted(found)]


def pinned_requirements(target: Target = LAMBDA) -> list[str]:
    """Every package the bundle ships, pinned to the installed version (`name==version`)."""
    return _pins(closure(declared_requirements(), target))


def _pins(dists: list[metadata.Distribution]) -> list[str]:
    return [f"{canonicalize_name(d.metadata['Name'])}=={d.version}" for d in dists]


def install_deps(requirements: list[str]) -> Path:
    """The cached folder holding `requirements` for Lambda's platform (installed if missing)."""
    key = hashlib.sha256(json.dumps([requirements, PLATFORMS, PYTHON_VERSION]).encode())
    target = DEPS_CACHE / key.hexdigest()[:16]
    if (target / STAMP).exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
         *platforms, "--only-binary=:all:", "--python-version", PYTHON_VERSION,
         "--implementation", "cp", "--no-compile", *requirements],
        check=True,
    )  # fmt: skip
    (target / STAMP).write_text(json.dumps(requirements))
    return target


def copy_installed(dists: list[metadata.Distribution], out: Path) -> None:
    """Copy each distribution's files (by its RECORD) from the running environment into
    `out`, as pip would have installed them there; scripts outside site-packages are left."""
    for dist in dists:
        base = Path(str(dist.locate_file(""))).resolve()
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            src = base / file
            if src.is_file():
                dst = out / file
                dst.parent.mkdir(parents=True, exist_ok=True)
                _link(str(src), str(dst))


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _link_tree(src: Path, dst: Path) -> None:
    """Copy a tree by hard links where possible (the deps are ~100 MB; links cost nothing)."""
    shutil.copytree(src, dst, copy_function=_link, dirs_exist_ok=True)


def build(out: Path = OUT, *, with_deps: bool = True, target: Target = LAMBDA) -> Path:
    """(Re)build the asset folder `out` from the current sources for `target`; return it."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    requirements: list[str] = []
    if with_deps:
        dists = closure(declared_requirements(), target)
        requirements = _pins(dists)
        if target.pip_platforms:
            _link_tree(install_deps(requirements), out)
            (out / STAMP).unlink()
        else:
            copy_installed(dists, out)
    for name, src in SOURCES.items():
        shutil.copytree(src, out / name, ignore=_IGNORE)
    stamp = {"target": target.name, "python": target.python_version, "requirements": requirements}
    (out / STAMP).write_text(json.dumps(stamp, indent=1))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--no-deps", action="store_true", help="sources only (offline)")
    parser.add_argument(
        "--host",
        action="store_true",
        help=f"for this machine ({platform.machine()}, Python {HOST.python_version}), from the "
        "installed packages, offline: for tests, not deployable",
    )
    args = parser.parse_args(argv)
    target = HOST if args.host else LAMBDA
    print(build(args.out, with_deps=not args.no_deps, target=target))


if __name__ == "__main__":
    main()
