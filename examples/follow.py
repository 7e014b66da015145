"""Start a run of the onboarding example on `ezgh dev` and print it step by step.

Reads the credentials `ezgh dev` wrote to .ezgh/dev.env. `--ready` only checks that the
example app has synced (exit status 0) and starts nothing.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ezgh_workflows import WorkflowsClient


def load_env(path: Path = Path(".ezgh/dev.env")) -> None:
    for line in path.read_text().splitlines():
        name, _, value = line.partition("=")
        if name and value:
            os.environ.setdefault(name.strip(), value.strip())


def onboarding_app(client: WorkflowsClient) -> dict:
    apps = client.list_apps()
    for app in apps["apps"]:
        if "onboarding" in app.get("workflows", []) and app.get("status") == "synced":
            return app
    raise LookupError("the example app has not synced yet")


def main() -> int:
    load_env()
    client = WorkflowsClient()
    app = onboarding_app(client)
    if "--ready" in sys.argv:
        return 0
    run = client.start_run(app["id"], "onboarding", {"userId": "u_42"})
    print(f"started run {run['id']} of onboarding (app {app['name']}): {run['status']}")
    seen: dict[str, str] = {}
    while True:
        run = client.get_run(run["id"])
        for step in run["steps"]:
            state = f"{step['status']}"
            if seen.get(step["id"]) != state:
                seen[step["id"]] = state
                extra = (
                    f" until {step['wakeAt']}" if step.get("wakeAt") and state == "sleeping" else ""
                )
                print(f"  step {step['name']:<14} {step['kind']:<6} {state}{extra}")
        if run["status"] not in ("running", "cancelling"):
            break
        time.sleep(0.2)
    print(f"run {run['status']}: output {run.get('output')!r}")
    events = client.list_run_events(run["id"])["events"]
    print(f"{len(events)} events: " + ", ".join(e["type"] for e in events))
    return 0 if run["status"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
