"""The sign-in link `ezgh dev` prints opens the console signed in, in one click."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.console.conftest import shot

pytestmark = pytest.mark.console
REPO = Path(__file__).resolve().parents[2]


def test_ezgh_dev_prints_a_link_that_signs_in(browser_context, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "EZGH_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "shared"), str(REPO / "sdk"), str(REPO)])
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ezgh_engine.cli",
            "dev",
            "--port",
            "0",
            "--state-dir",
            str(tmp_path / "state"),
            "--app",
            "examples.onboarding:app",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    output: list[str] = []
    try:
        for line in process.stdout:
            output.append(line)
            if "ready in" in line:
                break
        links = [line.split(": ", 2)[2].strip() for line in output if "console (signed in)" in line]
        assert len(links) == 1, "".join(output)
        values = dict(line.strip().split("=", 1) for line in output if line.startswith("EZGH_"))
        assert links[0].startswith(f"{values['EZGH_API_URL']}/console#key=")
        page = browser_context.new_page()
        page.goto(links[0])
        page.wait_for_selector("h1:text('Runs')")
        assert "key=" not in page.url
        assert (
            page.evaluate("() => sessionStorage.getItem('ezgh.apiKey')") == values["EZGH_API_KEY"]
        )
        page.click("#nav a[data-page=apps]")
        page.wait_for_selector("tr[data-app-name=onboarding]")
        shot(page, "dev-link-apps")
        page.close()
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
    assert process.returncode == 0, "".join(output) + rest
