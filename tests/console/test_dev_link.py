"""`ezgh dev --app examples.onboarding:app` in a subprocess, as a user runs it: it gets
ready, writes dev.env, registers and syncs the app and EzFlow's interpreter, answers health,
prints a sign-in link that opens the console signed in in one click, and stops cleanly on
SIGTERM. (One start of `ezgh dev` for all of it: each costs seconds. tests/e2e/test_dev_restart.py
takes a state dir through restarts.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.console.conftest import shot

pytestmark = pytest.mark.console
REPO = Path(__file__).resolve().parents[2]


def test_ezgh_dev_serves_an_app_and_prints_a_link_that_signs_in(browser_context, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "EZGH_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "shared"), str(REPO / "sdk"), str(REPO)])
    env["ONBOARDING_COOLDOWN"] = "1s"
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
        text = "".join(output)
        assert "ready in" in text, text
        values = dict(line.strip().split("=", 1) for line in output if line.startswith("EZGH_"))
        assert (tmp_path / "state" / "dev.env").read_text().splitlines() == [
            f"{k}={v}" for k, v in values.items()
        ]
        assert "app onboarding:" in text and "status=synced" in text, text
        assert "app ezgh:flows:" in text, text  # EzFlow's interpreter, served by default
        health = httpx.get(f"{values['EZGH_API_URL']}/v1/health")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        links = [line.split(": ", 2)[2].strip() for line in output if "console (signed in)" in line]
        assert len(links) == 1, text
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
        _a_run_names_its_app_and_the_code_that_ran_it(page, values, links[0])
        page.close()
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
    assert process.returncode == 0, "".join(output) + rest
    assert "stopping" in rest


def _a_run_names_its_app_and_the_code_that_ran_it(page, values, link):
    """A run of the served app shows the app by name, and its invocations' and steps' events
    the deployment `ezgh dev` reports for the app's code (`dev-<digest>`), where the
    Deployment column showed "—" throughout."""
    api = httpx.Client(
        base_url=f"{values['EZGH_API_URL']}/v1/organizations/{values['EZGH_ORG_ID']}"
        f"/projects/{values['EZGH_PROJECT_ID']}",
        headers={"Authorization": f"Bearer {values['EZGH_API_KEY']}"},
        timeout=30,
    )
    with api:
        (app,) = [a for a in api.get("/apps").json()["apps"] if a["name"] == "onboarding"]
        started = api.post(
            "/runs", json={"appId": app["id"], "workflow": "onboarding", "input": {"userId": "u"}}
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        for _ in range(600):
            if api.get(f"/runs/{run_id}").json()["status"] == "completed":
                break
            time.sleep(0.05)
        events = api.get(f"/runs/{run_id}/events").json()["events"]
    deployments = {e["type"]: e.get("deploymentId") for e in events}
    assert re.fullmatch(r"dev-[0-9a-f]{12}", deployments["invocation.completed"] or ""), events
    page.goto(link.split("#")[0] + "#/runs")
    row = page.wait_for_selector(f"tr[data-run-id='{run_id}']")
    assert row.query_selector("td:nth-child(3)").inner_text() == "onboarding"
    page.goto(f"{link.split('#')[0]}#/runs/{run_id}")
    page.wait_for_selector("[data-testid=event]")
    cells = page.locator("[data-testid=event] [data-testid=deployment]").all_inner_texts()
    assert deployments["invocation.completed"] in cells
    assert page.get_by_test_id("no-deployment").count() == 0
    shot(page, "dev-run")
