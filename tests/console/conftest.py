"""The web console in a real browser: Debian's Chromium driven by Playwright, against one
local runtime (moto server, pollers, API, the e2e test app) for the package, reset per test.

Never lets Playwright fetch a browser of its own: the system Chromium at /usr/bin/chromium is
the only one used. Without it (or without Playwright) the tests skip locally and fail in CI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.api.routes_console import sign_in_link
from ezgh_engine.clock import SkipClock
from ezgh_engine.local.runtime import LocalRuntime

from tests.clients import workflows_client
from tests.e2e import workflows_app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DEPLOYMENT_ID = "dpl-console-test"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"


def _missing() -> str | None:
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return (
            f"{CHROMIUM} is missing (bash scripts/test-deps.sh installs Debian's chromium as root)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is missing (the dev extra installs it)"
    return None


@pytest.fixture(scope="package")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium with a fresh profile for the package."""
    reason = _missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the console tests: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


# Package scope: moto keeps its state in process globals, so this runtime must be gone
# before another suite starts an emulator of its own.
@pytest.fixture(scope="package")
def runtime(
    tmp_path_factory: pytest.TempPathFactory, browser_context: Any
) -> Iterator[LocalRuntime]:
    # The app reports a deployment, so the events page has deployment IDs to show.
    previous = os.environ.get("EZGH_DEPLOYMENT_ID")
    os.environ["EZGH_DEPLOYMENT_ID"] = DEPLOYMENT_ID
    rt = LocalRuntime(
        port=0,
        state_dir=tmp_path_factory.mktemp("ezgh-console"),
        apps=[("e2e", workflows_app.served)],
        clock=SkipClock(),
    )
    rt.start()
    yield rt
    rt.stop()
    if previous is None:
        os.environ.pop("EZGH_DEPLOYMENT_ID", None)
    else:
        os.environ["EZGH_DEPLOYMENT_ID"] = previous


@pytest.fixture()
def engine(runtime: LocalRuntime) -> Iterator[LocalRuntime]:
    runtime.reset()
    workflows_app.reset()
    yield runtime
    # Let what the test left running finish before the next reset drops the state under it.
    for event in workflows_app.GATES.values():
        event.set()
    with contextlib.suppress(TimeoutError):
        runtime.wait_for(lambda: runtime.activity.snapshot()[0] == 0, timeout=15)


@pytest.fixture()
def page(browser_context: Any, engine: LocalRuntime) -> Iterator[Any]:
    """A new tab (its own sessionStorage), failing the test on any script error."""
    tab = browser_context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.set_default_timeout(20_000)
    yield tab
    tab.close()
    assert errors == [], errors


@pytest.fixture()
def link(engine: LocalRuntime) -> str:
    """The one-click sign-in link `ezgh dev` prints."""
    return sign_in_link(engine.api_url, engine.api_key, engine.org_id, engine.project_id)


def shot(page: Any, name: str) -> Path:
    """Save a full-page screenshot under build/console-screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture()
def client(engine: LocalRuntime) -> Any:
    return workflows_client(engine)


@pytest.fixture()
def app_id(engine: LocalRuntime) -> str:
    return str(engine.apps["e2e"].record["id"])
