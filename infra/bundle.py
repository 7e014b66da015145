"""Build the Lambda code asset locally, without Docker.

    python -m infra.bundle            # build/lambda: engine + handlers + aarch64 wheels
    python -m infra.bundle --no-deps  # engine + handlers only (offline; not deployable)

One folder serves every function (they differ only in handler). Third-party packages are
wheels for Lambda's platform (CPython 3.12 on arm64) fetched by pip with `--platform`, so the
build works on any machine; they are cached under build/lambda-deps/<hash> and reused until the
pinned versions change. Versions are pinned to what is installed in the running environment,
so Lambda runs the versions the tests ran.

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
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "lambda"
DEPS_CACHE = ROOT / "build" / "lambda-deps"
# What the handlers import at run time (moto, flask etc. serve only `ezgh dev`).
REQUIREMENTS = ("boto3", "botocore", "aws-lambda-powertools", "pydantic", "httpx", "croniter")
# Lambda's python3.12 runs on Amazon Linux 2023 (glibc 2.34): both tags load there.
PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64")
PYTHON_VERSION = "3.12"
SOURCES = {"ezgh_engine": ROOT / "shared" / "ezgh_engine", "functions": ROOT / "functions"}
STAMP = ".ezgh-bundle.json"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache")


def pinned_requirements() -> list[str]:
    """REQUIREMENTS pinned to the installed versions (unpinned when a package is missing)."""
    pins = []
    for name in REQUIREMENTS:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins


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


def _link_tree(src: Path, dst: Path) -> None:
    """Copy a tree by hard links where possible (the deps are ~100 MB; links cost nothing)."""

    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link, dirs_exist_ok=True)


def build(out: Path = OUT, *, with_deps: bool = True) -> Path:
    """(Re)build the asset folder `out` from the current sources; return it."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    requirements = pinned_requirements() if with_deps else []
    if with_deps:
        _link_tree(install_deps(requirements), out)
        (out / STAMP).unlink()
    for name, src in SOURCES.items():
        shutil.copytree(src, out / name, ignore=_IGNORE)
    (out / STAMP).write_text(json.dumps({"requirements": requirements}, indent=1))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--no-deps", action="store_true", help="sources only (offline)")
    args = parser.parse_args(argv)
    print(build(args.out, with_deps=not args.no_deps))


if __name__ == "__main__":
    main()
