"""scripts/setup.sh tells a newcomer where it is: its phases, and pip's own progress; the
demo's setup installs the runtime only, `--dev` (the tests') the tools too.

The script runs for real, in a copy of the repository's layout, with a stand-in Python whose
`-m venv` makes a `.venv/bin/python` that answers pip, compileall and the site-packages query
at once (a real install takes minutes and PyPI): what is under test is what the script prints,
passes to pip and leaves behind, not pip.
"""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The venv's python: pip prints lines of its own (and fails when FAKE_PIP_FAIL names a word of
# its arguments), logging each call; the site-packages query answers a folder.
VENV_PYTHON = r"""#!/usr/bin/env bash
here="$(cd "$(dirname "$0")/.." && pwd)"  # .venv
if [ "$1 $2" = "-m pip" ]; then
  echo "pip ${*:3}" >>"$here/pip-calls"
  echo "Collecting fake-package"
  echo "  Downloading fake_package-1.0-py3-none-any.whl (12 kB)"
  if [ -n "${FAKE_PIP_FAIL:-}" ] && [[ " ${*:3} " == *" $FAKE_PIP_FAIL "* ]]; then
    echo "ERROR: no matching distribution" >&2
    exit 1
  fi
  echo "Successfully installed fake-package-1.0"
elif [ "$1" = "-c" ]; then
  mkdir -p "$here/site" && echo "$here/site"
elif [ "$1 $2" = "-m compileall" ]; then
  exit 0
else
  echo "unexpected: $*" >&2
  exit 2
fi
"""

STANDIN = r"""#!/usr/bin/env bash
if [ "$1" = "--version" ]; then echo "Python 3.99.0"; exit 0; fi
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" && cp "$(dirname "$0")/venv-python" "$3/bin/python" && exit 0
fi
echo "unexpected: $*" >&2
exit 2
"""


def _layout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "sdk").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (repo / "sdk" / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, text in (("python", STANDIN), ("venv-python", VENV_PYTHON)):
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "FAKE_PIP_FAIL"}
    return repo, env | {"PYTHON": str(tools / "python")}


def _setup(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/setup.sh", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _phases(stdout: str) -> list[str]:
    return [line.split("]: ", 1)[1] for line in stdout.splitlines() if line.startswith("setup [")]


def _pip_calls(repo: Path) -> list[str]:
    calls = repo / ".venv" / "pip-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_first_setup_prints_its_phases_and_pips_own_lines_then_a_second_is_quick(
    tmp_path: Path,
) -> None:
    repo, env = _layout(tmp_path)
    first = _setup(repo, env)
    assert first.returncode == 0, first.stderr
    assert _phases(first.stdout) == [
        "creating .venv with Python 3.99.0...",
        "upgrading pip...",
        "installing the engine, the SDK and ezgh dev (first time: about 15 s)...",
        "byte-compiling the installed packages...",
        "ready: .venv (ezgh: .venv/bin/ezgh)",
    ]
    lines = first.stdout.splitlines()
    installing = next(i for i, line in enumerate(lines) if "installing the engine" in line)
    compiling = next(i for i, line in enumerate(lines) if "byte-compiling" in line)
    # pip's progress shows while it installs, and the log keeps a copy
    assert "Collecting fake-package" in lines[installing:compiling]
    assert "Collecting fake-package" in (repo / ".venv" / "install.log").read_text()
    calls = _pip_calls(repo)
    assert len(calls) == 2 and all(c.endswith("--progress-bar off") for c in calls), calls
    assert calls[1] == "pip install --no-compile -e ./sdk -e . --progress-bar off", calls

    second = _setup(repo, env)
    assert second.returncode == 0, second.stderr
    assert _phases(second.stdout) == ["ready: .venv is up to date"]
    assert len(_pip_calls(repo)) == 2  # nothing installed again


def test_a_failed_install_says_so_names_its_log_and_is_tried_again_next_time(
    tmp_path: Path,
) -> None:
    repo, env = _layout(tmp_path)
    failed = _setup(repo, env | {"FAKE_PIP_FAIL": "./sdk"})
    assert failed.returncode == 1
    assert "setup failed while installing; the log is in .venv/install.log" in failed.stderr
    assert not any(p.startswith("ready") for p in _phases(failed.stdout))
    assert "ERROR: no matching distribution" in (repo / ".venv" / "install.log").read_text()

    again = _setup(repo, env)
    assert again.returncode == 0, again.stderr
    assert _phases(again.stdout)[-1] == "ready: .venv (ezgh: .venv/bin/ezgh)"


def test_on_a_terminal_pip_draws_its_progress_bars(tmp_path: Path) -> None:
    repo, env = _layout(tmp_path)
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            ["bash", "scripts/setup.sh"],
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=follower,
            timeout=60,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 0
    calls = _pip_calls(repo)
    assert len(calls) == 2 and all(c.endswith("--progress-bar on") for c in calls), calls


def test_the_tests_setup_adds_the_tools_once_and_the_demos_then_keeps_them(
    tmp_path: Path,
) -> None:
    """`--dev` (scripts/test-deps.sh) on a runtime-only .venv installs the test tools and the
    CDK; the demo's setup after it is quick and takes nothing away, and an update of a
    pyproject.toml installs the tools again too."""
    repo, env = _layout(tmp_path)
    assert _setup(repo, env).returncode == 0
    dev = _setup(repo, env, "--dev")
    assert dev.returncode == 0, dev.stderr
    assert (
        "installing the engine, the SDK, the test tools and the CDK (first time: about a minute)..."
        in _phases(dev.stdout)
    )
    calls = _pip_calls(repo)
    assert len(calls) == 4 and "-e ./sdk -e .[dev,infra] " in calls[3], calls
    for args in ((), ("--dev",)):
        again = _setup(repo, env, *args)
        assert _phases(again.stdout) == ["ready: .venv is up to date"], args
    assert len(_pip_calls(repo)) == 4
    future = (repo / ".venv" / ".ezgh-installed").stat().st_mtime + 10
    os.utime(repo / "pyproject.toml", (future, future))
    assert _setup(repo, env).returncode == 0
    assert "-e ./sdk -e .[dev,infra] " in _pip_calls(repo)[-1]  # what was there stays


def test_an_unknown_argument_is_refused(tmp_path: Path) -> None:
    repo, env = _layout(tmp_path)
    done = _setup(repo, env, "--everything")
    assert done.returncode == 2 and "usage: scripts/setup.sh [--dev]" in done.stderr
    assert not (repo / ".venv").exists()
