"""The web console, driven in headless Chromium against the local engine."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from ezgh_engine import config
from ezgh_engine.adapters import aws
from ezgh_engine.local.runtime import LocalRuntime

from tests.console.conftest import DEPLOYMENT_ID, shot
from tests.e2e.test_durable_runs import wait_ended, wait_status

pytestmark = pytest.mark.console


def _api(engine: LocalRuntime, key: str | None = None) -> httpx.Client:
    return httpx.Client(
        base_url=engine.api_prefix,
        headers={"Authorization": f"Bearer {key or engine.api_key}"},
        timeout=30,
    )


def _session_key(page: Any) -> Any:
    return page.evaluate("() => sessionStorage.getItem('ezgh.apiKey')")


def _open_run(page: Any, link: str, run_id: str) -> None:
    page.goto(link)
    page.wait_for_selector("[data-testid=runs] table")
    page.goto(f"{link.split('#')[0]}#/runs/{run_id}")
    page.wait_for_selector("[data-testid=timeline]")


# --- serving ---------------------------------------------------------------------------------


def test_console_is_served_without_a_key_with_a_strict_policy(engine):
    page = httpx.get(f"{engine.api_url}/console", timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert 'src="console/console.js"' in page.text
    script = httpx.get(f"{engine.api_url}/console/console.js", timeout=10)
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    style = httpx.get(f"{engine.api_url}/console/console.css", timeout=10)
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    other = httpx.get(f"{engine.api_url}/console/..%2Fapi%2Fapp.py", timeout=10)
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "not_found"


# --- sign in ---------------------------------------------------------------------------------


def test_sign_in_link_keeps_the_key_in_session_storage_only(page, engine, link):
    assert "#key=" in link  # the fragment, which the browser never sends
    page.goto(link)
    page.wait_for_selector("h1:text('Runs')")
    assert "key=" not in page.url and page.url.endswith("#/runs")
    assert _session_key(page) == engine.api_key
    assert page.evaluate("() => localStorage.length") == 0
    page.click("#sign-out")
    page.wait_for_selector("[data-testid=signin]")
    assert _session_key(page) is None


def test_a_link_asks_before_it_replaces_the_tabs_session(page, engine, link):
    """A sign-in link opened in a tab that holds another session (someone else's link would
    put the tab in their project) asks first; nothing of the link is stored until then."""
    from ezgh_engine.api.routes_console import sign_in_link

    with _api(engine) as http:
        made = http.post("/apiKeys", json={"name": "other", "permissions": [{"action": "*"}]})
        assert made.status_code == 201, made.text
    other = made.json()["key"]
    other_link = sign_in_link(engine.api_url, other, engine.org_id, engine.project_id)
    page.goto(link)
    page.wait_for_selector("h1:text('Runs')")
    # In the same page (the fragment changes), and after a new load of the console.
    for opened in ("in place", "loaded"):
        if opened == "loaded":
            page.goto("about:blank")
        page.goto(other_link)
        prompt = page.wait_for_selector("[data-testid=replace-session]")
        assert "another API key" in prompt.inner_text()
        assert "key=" not in page.url
        assert _session_key(page) == engine.api_key  # nothing replaced yet
        assert other not in page.evaluate("() => JSON.stringify(sessionStorage)")
        shot(page, "replace-session")
        page.get_by_test_id("link-keep").click()
        page.wait_for_selector("h1:text('Runs')")
        assert _session_key(page) == engine.api_key
    page.goto(other_link)
    page.get_by_test_id("link-switch").click()
    page.wait_for_selector("h1:text('Runs')")
    assert _session_key(page) == other
    page.goto(other_link)  # the session it holds already: nothing to ask
    page.wait_for_selector("h1:text('Runs')")
    assert page.query_selector("[data-testid=replace-session]") is None
    assert _session_key(page) == other


def test_sign_in_form_shows_the_apis_error_for_a_wrong_key(page, engine):
    page.goto(f"{engine.api_url}/console")
    page.fill("input[name=org]", engine.org_id)
    page.fill("input[name=project]", engine.project_id)
    page.fill("input[name=key]", "not-a-key")
    page.click("button[type=submit]")
    error = page.wait_for_selector("[data-testid=signin-error]:not(:empty)")
    assert error.inner_text().startswith("unauthorized: ")
    assert _session_key(page) is None
    page.fill("input[name=key]", engine.api_key)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('Runs')")
    assert _session_key(page) == engine.api_key


# --- runs ------------------------------------------------------------------------------------


def test_find_a_run_by_filter_open_it_and_see_its_steps_in_order(
    page, engine, client, app_id, link
):
    wanted = client.start_run(app_id, "onboarding", {"cooldown": "1s"}, run_key="order-7")
    others = [client.start_run(app_id, "plain", {}) for _ in range(3)]
    for run in [wanted, *others]:
        wait_ended(engine, client, run["id"])
    page.goto(link)
    page.wait_for_selector("[data-testid=runs] tr[data-run-id]")
    assert page.locator("[data-testid=runs] tr[data-run-id]").count() == 4
    page.fill("input[name=runKey]", "order-7")
    page.click("[data-testid=run-filters] button[type=submit]")
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=runs] tr[data-run-id]').length === 1"
    )
    row = page.locator("[data-testid=runs] tr[data-run-id]")
    assert row.get_attribute("data-run-id") == wanted["id"]
    # The workflow and status filters narrow the same way.
    page.fill("input[name=runKey]", "")
    page.fill("input[name=workflow]", "plain")
    page.select_option("select[name=status]", "completed")
    page.click("[data-testid=run-filters] button[type=submit]")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=runs] tr[data-run-id]')]"
        ".map(r => r.children[1].textContent).join() === 'plain,plain,plain'"
    )
    shot(page, "runs")
    page.fill("input[name=workflow]", "onboarding")
    page.click("[data-testid=run-filters] button[type=submit]")
    page.click(f"tr[data-run-id='{wanted['id']}'] a")
    page.wait_for_selector("[data-testid=timeline] [data-testid=step]")
    names = page.locator("[data-testid=step]").evaluate_all(
        "els => els.map(e => [e.dataset.stepName, e.dataset.kind, e.dataset.status])"
    )
    assert names == [
        ["load-user", "run", "completed"],
        ["welcome-email", "run", "completed"],
        ["cooldown", "sleep", "completed"],
        ["follow-up", "run", "completed"],
    ]
    # A sleep is drawn as a wait (hatched bar), not as work.
    assert page.locator("[data-kind=sleep] .bar.k-sleep").count() == 1
    assert page.get_by_test_id("run-status").inner_text() == "completed"
    assert '"a@x.io"' in page.get_by_test_id("run-output").inner_text()
    # Events in order, the steps' with the deployment that ran them.
    events = page.locator("[data-testid=event]").evaluate_all(
        "rows => rows.map(r => [r.children[1].textContent, r.children[3].textContent,"
        " r.children[4].textContent])"
    )
    assert events[0][0] == "run.started" and events[-1][0] == "run.completed"
    steps = [(step, dep) for kind, step, dep in events if kind == "step.completed"]
    assert [s for s, _ in steps] == ["load-user#1", "welcome-email#1", "cooldown#1", "follow-up#1"]
    assert {d for s, d in steps if s != "cooldown#1"} == {DEPLOYMENT_ID}
    page.click("[data-step-name=load-user]")
    assert "a@x.io" in page.get_by_test_id("step-output").inner_text()
    assert "null" not in page.locator(".detail").inner_text()  # no stray text nodes
    assert page.get_by_test_id("cancel").is_disabled()
    assert page.get_by_test_id("retry").is_disabled()
    shot(page, "run")


def test_cursor_paging_walks_every_run_once(page, engine, client, app_id, link):
    started = [client.start_run(app_id, "kid", {"n": i})["id"] for i in range(45)]
    for run_id in started:
        wait_ended(engine, client, run_id)
    page.goto(link)
    page.wait_for_selector("[data-testid=runs] tr[data-run-id]")
    page.select_option("select[name=limit]", "20")
    page.click("[data-testid=run-filters] button[type=submit]")
    rows = "document.querySelectorAll('[data-testid=runs] tr[data-run-id]')"
    seen: list[str] = []
    for number, size in ((1, 20), (2, 20), (3, 5)):
        page.wait_for_selector(f"[data-testid=page-number]:text('page {number}')")
        page.wait_for_function(f"() => {rows}.length === {size}")
        seen += page.locator("tr[data-run-id]").evaluate_all("rs => rs.map(r => r.dataset.runId)")
        if number < 3:
            page.get_by_test_id("next-page").click()
    assert page.get_by_test_id("next-page").is_disabled()
    assert sorted(seen) == sorted(started)  # every run once, newest first
    assert seen == list(reversed(started))
    page.click("button:text('Previous')")
    page.wait_for_selector("[data-testid=page-number]:text('page 2')")
    page.wait_for_function(f"() => {rows}[0].dataset.runId === '{seen[20]}'")


def test_the_runs_list_refreshes_while_runs_move(page, engine, client, app_id, link):
    from tests.e2e import workflows_app

    run = client.start_run(app_id, "gated", {})
    wait_status(engine, client, run["id"], lambda r: bool(r["steps"]))
    page.goto(link)
    page.wait_for_selector(f"tr[data-run-id='{run['id']}'][data-status=running]")
    assert "1 run moving" in page.get_by_test_id("refresh-note").inner_text()
    workflows_app.GATES[run["id"]].set()
    # No click: the page asks again every two seconds while a run on it has not ended.
    page.wait_for_selector(f"tr[data-run-id='{run['id']}'][data-status=completed]", timeout=30_000)
    assert page.get_by_test_id("refresh-note").inner_text() == ""


# Where each part of a lane is drawn, in pixels: its track, the failed attempts' ticks, the
# backoffs and the bar of the attempt that ran last.
_LANE_GEOMETRY = """lane => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.right]; };
  return {
    track: box(lane.querySelector('.track')),
    ticks: [...lane.querySelectorAll('.failed-attempt')].map(box),
    backoffs: [...lane.querySelectorAll('[data-testid=backoff]')].map(box),
    bar: box(lane.querySelector('.bar')),
  };
}"""


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_retries_are_visible_on_the_timeline(page, engine, client, app_id, link, monkeypatch):
    """A retried step's lane shows where each attempt failed and its backoff until the next
    attempt was due (the `step.retrying` event's `retryAt`): while the step waits, and once
    it completed, each before the attempt that came after it."""
    monkeypatch.setenv(config.ENV_SQS_MAX_DELAY, "0")  # backoffs through the SkipClock
    config.reset_settings()

    def failed(attempt: int) -> dict[str, Any]:
        return wait_status(
            engine,
            client,
            run["id"],
            lambda r: (
                r["steps"]
                and r["steps"][0]["status"] == "retrying"
                and r["steps"][0]["attempt"] == attempt
            ),
        )

    try:
        run = client.start_run(app_id, "flaky", {"succeed_on": 7, "retries": 10})
        # Skip over the first backoffs; the sixth is 16 to 32 s long: time to look at it.
        for attempt in range(1, 6):
            failed(attempt)
            engine.clock.advance(timedelta(minutes=11))
        waiting = failed(6)
        _open_run(page, link, run["id"])
        lane = page.locator("[data-step-name=call]")
        assert lane.get_by_test_id("backoff").count() == 6
        assert "next attempt" in lane.inner_text()
        retrying = [
            e for e in client.list_run_events(run["id"])["events"] if e["type"] == "step.retrying"
        ]
        assert retrying[-1]["retryAt"] == waiting["steps"][0]["wakeAt"]  # the event says when
        drawn = [
            int(ms)
            for ms in lane.get_by_test_id("backoff").evaluate_all(
                "els => els.map(e => e.dataset.ms)"
            )
        ]
        assert drawn == [
            round((_iso(e["retryAt"]) - _iso(e["at"])).total_seconds() * 1000) for e in retrying
        ]
        assert drawn[-1] >= 16_000
        engine.clock.advance(timedelta(minutes=11))
        wait_ended(engine, client, run["id"])
    finally:
        monkeypatch.delenv(config.ENV_SQS_MAX_DELAY)
        config.reset_settings()
    _open_run(page, link, run["id"])
    lane = page.locator("[data-step-name=call]")
    assert lane.get_by_test_id("retries").inner_text() == " · 6 retries"
    assert "in backoff" in lane.get_by_test_id("backoff-total").inner_text()
    shapes = lane.evaluate(_LANE_GEOMETRY)
    track_left, track_right = shapes["track"]
    assert len(shapes["ticks"]) == len(shapes["backoffs"]) == 6
    for (tick, _), (left, right) in zip(shapes["ticks"], shapes["backoffs"], strict=True):
        # Each backoff starts where its attempt failed, inside the track, before the
        # attempt that succeeded.
        assert track_left - 2 <= tick <= left + 2 and right <= track_right + 1
        assert right > left and right <= shapes["bar"][0] + 1
    types = page.locator("[data-testid=event] td:nth-child(2)").all_inner_texts()
    assert types.count("step.retrying") == 6
    lane.click()  # the detail lists the failed attempts
    assert "attempt 6 failed at" in page.get_by_test_id("attempts").inner_text()
    shot(page, "retried")


def test_a_steps_kind_label_and_its_name_never_run_together(page, engine, client, app_id, link):
    """ "CALLBACKapprove": the kind label was a fixed width its longer words overflowed, so
    the name started right where the label's text ended."""
    run = client.start_run(app_id, "approval", {})
    wait_status(engine, client, run["id"], lambda r: len(r["steps"]) >= 2)
    _open_run(page, link, run["id"])
    for name in ("approve", "publish"):
        gap = page.locator(f"[data-step-name={name}] .name").evaluate(
            """cell => {
              const kind = cell.querySelector('.kind');
              const label = document.createRange();
              label.selectNodeContents(kind);  // its text, also where it overflows its box
              const rest = document.createRange();
              rest.setStartAfter(kind);
              rest.setEndAfter(cell.lastChild);
              const end = Math.max(kind.getBoundingClientRect().right,
                                   label.getBoundingClientRect().right);
              return rest.getBoundingClientRect().left - end;
            }"""
        )
        assert gap >= 4, (name, gap)
    assert page.locator("[data-step-name=approve] .name").get_attribute("title") == (
        "callback approve"
    )
    shot(page, "kinds")


def test_a_run_that_ended_before_any_step_says_so(page, engine, client, app_id, link):
    """Not "No steps yet.": an ended run will never have one."""
    run = client.start_run(app_id, "sequence", {"n": "not a number"})  # range() raises
    ended = wait_ended(engine, client, run["id"])
    assert ended["status"] == "failed" and ended["steps"] == []
    _open_run(page, link, run["id"])
    text = page.get_by_test_id("timeline").inner_text()
    assert "No steps: the run failed before its first step" in text
    assert "yet" not in text


def test_apps_are_named_even_when_they_came_after_the_page(page, engine, client, app_id, link):
    """A run of an app registered after the runs page read the app names (as `ezgh dev`
    registers its apps while a console is open) is shown by the app's name, on the list, on
    its page and on the schedules page; never as its UUID."""
    from ezgh_engine.adapters import registry_store

    page.goto(link)
    page.wait_for_selector("[data-testid=runs] table")
    with _api(engine) as http:
        made = http.post("/apps", json={"name": "late-workers", "kind": "pull"}).json()
        stored = registry_store.get_app(engine.project_id, made["id"])
        assert stored is not None
        registry_store.update_app_after_sync(stored, ["work"])
        started = http.post("/runs", json={"appId": made["id"], "workflow": "work", "input": {}})
        assert started.status_code == 201, started.text
        schedule = {"appId": made["id"], "workflow": "work", "cron": "0 9 * * 1"}
        assert http.post("/schedules", json=schedule).status_code == 201
    run_id = started.json()["id"]
    row = f"tr[data-run-id='{run_id}']"
    page.click("[data-testid=run-filters] button[type=submit]")  # the page is not left
    page.wait_for_selector(row)
    cell = page.locator(f"{row} td:nth-child(3)")  # the App column
    assert cell.inner_text() == "late-workers", cell.inner_text()
    assert made["id"] not in page.locator(row).inner_text()
    page.goto(f"{link.split('#')[0]}#/runs/{run_id}")
    assert page.get_by_test_id("run-app").inner_text() == "late-workers"
    page.click("#nav a[data-page=schedules]")
    assert page.locator("[data-testid=schedule] td:nth-child(2)").inner_text() == "late-workers"
    with _api(engine) as http:
        assert http.post(f"/runs/{run_id}/cancel").status_code == 202


def test_the_events_say_when_no_deployment_was_reported(
    page, engine, client, app_id, link, monkeypatch
):
    """The deployment column was "—" throughout under `ezgh dev`: the events carry
    `deploymentId` where the app reports one (the test app does, see conftest), and an app
    that reports none is told how to."""
    monkeypatch.delenv("EZGH_DEPLOYMENT_ID")
    run = wait_ended(engine, client, client.start_run(app_id, "sequence", {"n": 1})["id"])
    _open_run(page, link, run["id"])
    cells = page.locator("[data-testid=event] [data-testid=deployment]").all_inner_texts()
    assert set(cells) == {"—"}
    assert "PushApp(deployment_id=" in page.get_by_test_id("no-deployment").inner_text()
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", DEPLOYMENT_ID)
    run = wait_ended(engine, client, client.start_run(app_id, "sequence", {"n": 1})["id"])
    _open_run(page, link, run["id"])
    cells = page.locator("[data-testid=event] [data-testid=deployment]").all_inner_texts()
    assert DEPLOYMENT_ID in cells
    assert page.get_by_test_id("no-deployment").count() == 0


def test_a_waiting_callbacks_url_is_shown_with_its_run(page, engine, client, app_id, link):
    """GetRun gives a waiting callback's URL to a key that may complete it (the dev admin
    key may): the run's page shows it, and it is the URL that completes the callback."""
    run = client.start_run(app_id, "approval", {})
    waiting = wait_status(
        engine, client, run["id"], lambda r: r["steps"] and r["steps"][0]["status"] == "waiting"
    )
    url = waiting["steps"][0]["url"]
    _open_run(page, link, run["id"])
    assert page.locator("[data-testid=callback-url]").inner_text() == f"approve: POST {url}"
    assert httpx.post(url, json={"ok": True}, timeout=10).status_code == 200
    assert wait_ended(engine, client, run["id"])["output"] == {"body": {"ok": True}}


def test_cancel_a_running_run(page, engine, client, app_id, link):
    run = client.start_run(app_id, "waiter", {"kind": "sleep"})
    wait_status(
        engine, client, run["id"], lambda r: any(s["status"] == "sleeping" for s in r["steps"])
    )
    _open_run(page, link, run["id"])
    assert page.locator("[data-kind=sleep][data-status=sleeping]").count() == 1
    assert page.get_by_test_id("retry").is_disabled()
    page.get_by_test_id("cancel").click()
    # The page refreshes itself while the run moves, until it ends.
    page.wait_for_selector("[data-testid=run-status] .badge:text('cancelled')", timeout=30_000)
    assert client.get_run(run["id"])["status"] == "cancelled"
    shot(page, "cancelled")


def test_retry_a_failed_run(page, engine, client, app_id, link):
    run = wait_ended(engine, client, client.start_run(app_id, "never-retry", {})["id"])
    assert run["status"] == "failed" and run["attempt"] == 1
    _open_run(page, link, run["id"])
    assert "no point" in page.get_by_test_id("run-error").inner_text()
    assert page.get_by_test_id("cancel").is_disabled()
    page.get_by_test_id("retry").click()
    page.wait_for_selector("[data-testid=run-attempt]:text('2')", timeout=30_000)
    again = wait_ended(engine, client, run["id"])
    assert again["attempt"] == 2 and again["status"] == "failed"
    page.wait_for_selector("[data-testid=run-status] .badge:text('failed')")


def test_a_child_run_links_to_its_parent(page, engine, client, app_id, link):
    parent = client.start_run(app_id, "parent", {"child": "kid", "ci": {"x": 1}})
    wait_ended(engine, client, parent["id"])
    children = client.search_runs(workflow="kid")["runs"]
    assert len(children) == 1
    _open_run(page, link, children[0]["id"])
    page.get_by_test_id("parent-link").click()
    page.wait_for_selector("[data-testid=run-title]:text('parent')")
    assert page.url.endswith(f"#/runs/{parent['id']}")
    kinds = page.locator("[data-testid=step]").evaluate_all("els => els.map(e => e.dataset.kind)")
    assert kinds == ["invoke"]
    page.get_by_test_id("child-link").click()  # the invoke step's childRunId, back down
    page.wait_for_selector("[data-testid=run-title]:text('kid')")
    assert page.url.endswith(f"#/runs/{children[0]['id']}")


def test_large_values_are_read_through_get_payload(page, engine, client, app_id, link):
    size = 200 * 1024
    run = wait_ended(engine, client, client.start_run(app_id, "big", {"size": size})["id"])
    assert run["outputRef"] == "output" and "outputRef" in run["steps"][0]
    _open_run(page, link, run["id"])
    page.click("[data-step-name=blob]")  # the step's detail, with its own stored value
    loaders = page.get_by_test_id("load-payload")
    assert loaders.count() == 2
    for i in range(2):
        loaders.nth(i).click()
    page.wait_for_function("() => document.querySelectorAll('[data-testid=payload]').length === 2")
    texts = page.get_by_test_id("payload").all_inner_texts()
    blob = "x" * size
    assert sorted(texts) == sorted([json.dumps(blob), json.dumps({"blob": blob}, indent=2)])


def test_an_unknown_run_shows_the_apis_words(page, engine, link):
    page.goto(link)
    page.wait_for_selector("h1:text('Runs')")
    page.goto(f"{link.split('#')[0]}#/runs/00000000-0000-4000-8000-000000000000")
    error = page.wait_for_selector("[data-testid=error]")
    assert re.match(r"^not_found: .+", error.inner_text())


def test_api_data_is_rendered_as_text_never_as_html(page, engine, client, app_id, link):
    evil = "<img src=x onerror=window.__pwned=1><b>bold</b>"
    run = client.start_run(app_id, "kid", {"name": evil})
    wait_ended(engine, client, run["id"])
    page.goto(link)
    page.wait_for_selector(f"tr[data-run-id='{run['id']}']")
    _open_run(page, link, run["id"])
    assert evil in page.get_by_test_id("run-input").inner_text()
    assert page.locator("main img").count() == 0
    assert page.evaluate("() => window.__pwned") is None


# --- a key with fewer permissions --------------------------------------------------------------


def test_a_read_only_key_sees_the_apis_refusal_not_a_crash(page, engine, client, app_id):
    with _api(engine) as http:
        made = http.post(
            "/apiKeys",
            json={"name": "reader", "permissions": [
                {"action": "workflows.runs.read"}, {"action": "queues.messages.send"}]},
        )  # fmt: skip
        assert made.status_code == 201, made.text
    reader = made.json()["key"]
    run = wait_ended(engine, client, client.start_run(app_id, "never-retry", {})["id"])
    from ezgh_engine.api.routes_console import sign_in_link

    link = sign_in_link(engine.api_url, reader, engine.org_id, engine.project_id)
    _open_run(page, link, run["id"])
    button = page.get_by_test_id("retry")
    button.click()
    error = page.wait_for_selector("[data-testid=action-error]:not(:empty)")
    assert error.inner_text().startswith("forbidden: ")
    assert button.is_disabled()
    assert client.get_run(run["id"])["attempt"] == 1
    shot(page, "forbidden")
    # A key that may send to queues reads them; redriving one needs queues.manage.
    with _api(engine) as http:
        assert http.post("/queues", json={"name": "audit"}).status_code == 201
    page.click("#nav a[data-page=queues]")
    redrive = page.locator("tr[data-queue-name=audit]").get_by_test_id("redrive")
    redrive.click()
    error = page.wait_for_selector("tr[data-queue-name=audit] [data-testid=action-error]")
    assert error.inner_text().startswith("forbidden: ")
    assert redrive.is_disabled()


# --- queues and the other pages ------------------------------------------------------------------


def _dlq_url(queue: dict[str, Any]) -> str:
    return str(aws.client("sqs").get_queue_url(QueueName=f"ezgh-q-{queue['id']}-dlq")["QueueUrl"])


def test_redrive_dead_letters_and_send_a_message(page, engine, link):
    with _api(engine) as http:
        queue = http.post("/queues", json={"name": "payments", "maxReceiveCount": 2}).json()
    # Two messages that exhausted their receives (as tests/e2e/test_queues.py shows them
    # arriving); put straight into the dead-letter queue, as SQS's redrive policy would.
    for body in ("no key", "bad key"):
        aws.client("sqs").send_message(QueueUrl=_dlq_url(queue), MessageBody=body)
    page.goto(link)
    page.click("#nav a[data-page=queues]")
    row = page.locator("tr[data-queue-name=payments]")
    row.get_by_test_id("redrive").click()
    page.wait_for_selector("tr[data-queue-name=payments] .inline-msg:text('moved 2')")
    assert "0 left" in row.locator(".inline-msg").inner_text()
    main_url = aws.client("sqs").get_queue_url(QueueName=f"ezgh-q-{queue['id']}")["QueueUrl"]
    got = aws.client("sqs").receive_message(QueueUrl=main_url, MaxNumberOfMessages=10)
    assert sorted(m["Body"] for m in got.get("Messages", [])) == ["bad key", "no key"]
    page.fill("[data-testid=send] textarea[name=body]", "hello")
    page.fill("[data-testid=send] input[name=attributes]", '{"orderKey": "order:1"}')
    page.click("[data-testid=send] button[type=submit]")
    page.wait_for_selector("[data-testid=send-result]:text('sent: ')")
    shot(page, "queues")


def test_apps_schedules_and_subscriptions(page, engine, app_id, link):
    with _api(engine) as http:
        schedule = http.post(
            "/schedules",
            json={
                "appId": app_id,
                "workflow": "plain",
                "cron": "0 9 * * 1",
                "timezone": "Europe/Paris",
            },
        ).json()
        queue = http.post("/queues", json={"name": "orders"}).json()
        sub = http.post(
            "/subscriptions",
            json={
                "queueId": queue["id"],
                "target": {"kind": "workflow", "mode": "start", "appId": app_id, "workflow": "kid"},
            },
        ).json()
    page.goto(link)
    page.click("#nav a[data-page=apps]")
    app_row = page.locator("tr[data-app-name=e2e]")
    assert "onboarding" in app_row.inner_text() and "synced" in app_row.inner_text()
    app_row.get_by_test_id("sync").click()
    page.wait_for_selector("tr[data-app-name=e2e] .inline-msg:text('synced')")
    page.click("#nav a[data-page=schedules]")
    row = page.locator("[data-testid=schedule]")
    assert "0 9 * * 1" in row.inner_text() and "Europe/Paris" in row.inner_text()
    row.locator("button:text('Pause')").click()
    page.wait_for_selector("[data-testid=schedule] button:text('Resume')")
    with _api(engine) as http:
        assert http.get(f"/schedules/{schedule['id']}").json()["status"] == "paused"
    assert page.locator("[data-testid=schedule] .badge").inner_text() == "paused"
    page.locator("[data-testid=schedule] button:text('Resume')").click()
    page.wait_for_selector("[data-testid=schedule] button:text('Pause')")
    with _api(engine) as http:
        assert http.get(f"/schedules/{schedule['id']}").json()["status"] == "active"
    page.click("#nav a[data-page=subscriptions]")
    sub_row = page.locator("[data-testid=subscription]")
    assert "workflow start: kid" in sub_row.inner_text()
    assert sub_row.get_by_test_id("sub-status").inner_text() == "ok"
    sub_row.locator("button:text('Pause')").click()
    page.wait_for_selector("[data-testid=subscription] button:text('Resume')")
    with _api(engine) as http:
        assert http.get(f"/subscriptions/{sub['id']}").json()["state"] == "paused"
    shot(page, "subscriptions")


def test_flow_job_graph(page, engine, link):
    graph = {
        "nodes": [
            {"id": "start", "moduleType": "trigger.manual"},
            {"id": "shape", "moduleType": "transform", "config": {"expression": "input.name"}},
            {"id": "greet", "moduleType": "transform", "config": {"expression": "in.shape"}},
            {"id": "named", "moduleType": "condition", "config": {"expression": "in.greet"}},
            {"id": "hello", "moduleType": "transform", "config": {"expression": "'hello'"}},
            {"id": "who", "moduleType": "transform", "config": {"expression": "'who?'"}},
        ],
        "edges": [
            {"source": "start", "target": "shape"},
            {"source": "shape", "target": "greet"},
            {"source": "greet", "target": "named"},
            {"source": "named", "sourceHandle": "true", "target": "hello"},
            {"source": "named", "sourceHandle": "false", "target": "who"},
        ],
    }
    with _api(engine) as http:
        if http.get("/flows").status_code == 404:
            pytest.skip("this engine has no flows (EzFlow, /flows, is not on this branch)")
        flow = http.post("/flows", json={"name": "greet"}).json()
        made = http.post(f"/flows/{flow['id']}/commits", json={"graph": graph})
        assert made.status_code == 201, made.text
        started = http.post(f"/flows/{flow['id']}/jobs", json={"input": {"name": "Ada"}})
        assert started.status_code == 201, started.text
        job = started.json()
        engine.wait_for(
            lambda: http.get(f"/jobs/{job['id']}").json()["status"] == "COMPLETED", timeout=30
        )
    page.goto(link)
    page.wait_for_selector("#nav-flows:not([hidden])")
    page.click("#nav-flows")
    page.wait_for_selector("h2:text('Failed items') + table :text('No failed items.')")
    row = page.locator("[data-testid=job]").filter(has_text=job["id"])
    assert row.get_by_test_id("job-flow").inner_text() == "greet"  # the flow's name
    page.click(f"a[href='#/jobs/{job['id']}']")
    page.wait_for_selector("[data-testid=flow-graph] g.node")
    assert page.get_by_test_id("job-flow").inner_text() == "greet"
    nodes = page.locator("[data-testid=flow-graph] g.node").evaluate_all(
        "gs => gs.map(g => [g.dataset.nodeId, g.dataset.status, g.getBBox().x + g.getCTM().e])"
    )
    statuses = {"who": "SKIPPED"}
    assert [(n, st) for n, st, _ in nodes] == [
        (n["id"], statuses.get(n["id"], "COMPLETED")) for n in graph["nodes"]
    ]
    xs = [x for _, _, x in nodes]
    assert xs == sorted(xs) and len(set(xs)) == 5  # one layer per step of the chain
    assert page.locator("[data-testid=flow-graph] path.edge").count() == 5
    labels = page.locator("[data-testid=flow-graph] [data-testid=edge-label]").evaluate_all(
        "els => els.map(e => e.textContent)"
    )
    assert sorted(labels) == ["false", "true"]  # the condition's edges say which way
    page.click("[data-testid=flow-graph] g.node[data-node-id=greet]")
    assert '"Ada"' in page.get_by_test_id("action-detail").inner_text()
    shot(page, "flow-job")


def test_a_jobs_values_stored_separately_load_on_demand(page, engine, link):
    """An action's output over the inline size is a reference in GetJob, and so is the input
    built from it: the job page loads each from the job's payloads route when asked."""
    big = "y" * 100_000
    graph = {
        "nodes": [
            {"id": "start", "moduleType": "trigger.manual"},
            {"id": "copy", "moduleType": "transform", "config": {"expression": "input.s"}},
            {"id": "size", "moduleType": "transform", "config": {"expression": "length(in.copy)"}},
        ],
        "edges": [{"source": "start", "target": "copy"}, {"source": "copy", "target": "size"}],
    }
    with _api(engine) as http:
        if http.get("/flows").status_code == 404:
            pytest.skip("this engine has no flows (EzFlow, /flows, is not on this branch)")
        flow = http.post("/flows", json={"name": "stored"}).json()
        assert http.post(f"/flows/{flow['id']}/commits", json={"graph": graph}).status_code == 201
        job = http.post(f"/flows/{flow['id']}/jobs", json={"input": {"s": big}}).json()
        engine.wait_for(
            lambda: http.get(f"/jobs/{job['id']}").json()["status"] == "COMPLETED", timeout=30
        )
    page.goto(link)
    page.goto(link.split("#")[0] + f"#/jobs/{job['id']}")
    page.wait_for_selector("[data-testid=flow-graph] g.node")
    page.click("[data-testid=flow-graph] g.node[data-node-id=size]")
    detail = page.get_by_test_id("action-detail")
    assert "ref: actions/size/input" in detail.inner_text()
    assert detail.get_by_test_id("load-payload").count() == 1  # its output (a number) is inline
    detail.get_by_test_id("load-payload").click()
    page.wait_for_selector("[data-testid=action-detail] [data-testid=payload]")
    assert big[:50] in detail.get_by_test_id("payload").inner_text()


def test_a_flow_job_links_to_the_child_run_of_its_workflow_invoke(page, engine, app_id, link):
    graph = {
        "nodes": [
            {"id": "start", "moduleType": "trigger.manual"},
            {
                "id": "code",
                "moduleType": "workflow.invoke",
                "config": {"appId": app_id, "workflow": "kid", "input": {"x": 1}},
            },
        ],
        "edges": [{"source": "start", "target": "code"}],
    }
    with _api(engine) as http:
        if http.get("/flows").status_code == 404:
            pytest.skip("this engine has no flows (EzFlow, /flows, is not on this branch)")
        flow = http.post("/flows", json={"name": "calls-kid"}).json()
        assert http.post(f"/flows/{flow['id']}/commits", json={"graph": graph}).status_code == 201
        job = http.post(f"/flows/{flow['id']}/jobs", json={}).json()
        engine.wait_for(
            lambda: http.get(f"/jobs/{job['id']}").json()["status"] == "COMPLETED", timeout=30
        )
        child = http.get(f"/jobs/{job['id']}").json()["actions"][1]["childRunId"]
    page.goto(link)
    page.wait_for_selector("[data-testid=runs] table")
    page.goto(f"{link.split('#')[0]}#/jobs/{job['id']}")
    page.wait_for_selector("[data-testid=flow-graph] g.node[data-node-id=code]")
    page.click("[data-testid=flow-graph] g.node[data-node-id=code]")
    page.get_by_test_id("child-run-link").click()
    page.wait_for_selector("[data-testid=run-title]:text('kid')")
    assert page.url.endswith(f"#/runs/{child}")
    page.get_by_test_id("parent-link").click()  # the child run's parent is the job
    page.wait_for_selector(f"h1:text('Job {job['id']}')")
    assert page.get_by_test_id("job-flow").inner_text() == "calls-kid"
    page.goto(link)  # the runs list shows the child run, never the job
    page.wait_for_selector(f"[data-run-id='{child}']")
    assert page.locator(f"[data-run-id='{job['id']}']").count() == 0


class _Hook:
    """A loopback endpoint that answers 400 until `healed` (an `http.request` node's target)."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hook = self
        self.healed = False

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                status = 200 if hook.healed else 400
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps({"ok": hook.healed}).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_flow_page_draws_its_commit_and_a_failed_item_is_retried(page, engine, link):
    hook = _Hook()
    graph = {
        "nodes": [
            {"id": "start", "moduleType": "trigger.manual"},
            {
                "id": "hook",
                "moduleType": "http.request",
                "config": {"url": hook.url, "method": "POST"},
            },
        ],
        "edges": [{"source": "start", "target": "hook"}],
    }
    try:
        with _api(engine) as http:
            if http.get("/flows").status_code == 404:
                pytest.skip("this engine has no flows (EzFlow, /flows, is not on this branch)")
            flow = http.post("/flows", json={"name": "hooked"}).json()
            made = http.post(f"/flows/{flow['id']}/commits", json={"graph": graph, "message": "v1"})
            assert made.status_code == 201, made.text
            job = http.post(f"/flows/{flow['id']}/jobs", json={}).json()
            engine.wait_for(
                lambda: http.get(f"/jobs/{job['id']}").json()["status"] == "FAILED", timeout=30
            )
            page.goto(link)
            page.wait_for_selector("#nav-flows:not([hidden])")
            page.click("#nav-flows")
            page.click("[data-testid=flow-link]:text('hooked')")
            page.wait_for_selector("[data-testid=commit-graph] g.node[data-node-id=hook]")
            assert page.get_by_test_id("flow-title").inner_text() == "hooked"
            assert page.locator("[data-testid=commit]").count() == 1
            assert page.locator("[data-testid=commit-graph] path.edge").count() == 1
            page.click("[data-testid=commit-graph] g.node[data-node-id=hook]")
            assert hook.url in page.get_by_test_id("node-detail").inner_text()
            shot(page, "flow-commit")
            page.click("a:text('← Flows')")
            row = page.locator("[data-testid=failed-item]").filter(has_text="hook (http.request)")
            hook.healed = True
            row.get_by_test_id("retry-item").click()
            engine.wait_for(
                lambda: http.get(f"/jobs/{job['id']}").json()["status"] == "COMPLETED", timeout=30
            )
            items = http.get("/failedItems", params={"jobId": job["id"]}).json()["failedItems"]
            assert len(items) == 1 and items[0]["retriedAt"]
    finally:
        hook.server.shutdown()
